"""Risk hide / restore decisions with maker-checker approval (RISK-3 … RISK-5, REC-2, OPS-6; issue 14 §4).

request (operator: a video, its users, a reason, evidence; the parameters hashed)
  -> approve (another operator: the database refuses the requester and any hash but the request's; the
     decision takes the next risk version)
  -> the system's ops job applies it: per chunk of users, one transaction on `default` upserts each
     (video, user)'s risk state at the decision's risk version, only over an older one; then dirty marks
     on the count partition so the display snapshot takes the new hidden count; then APPLIED (and the
     restored hide RESTORED).
A hide sets its users hidden; a restore sets the users of the hide it restores back to shown, except
those another standing hide of the same video still covers. The relation facts and the count projection
are never touched: the display snapshot subtracts the LIKED projection rows whose relation is hidden
(counting.risk.selectors), so an unlike, a like again, a rebuild or a migration of the projection
needs nothing from the ledger.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import connections, transaction
from django.utils import timezone

from counting import routing
from counting.models import DirtyVideo
from counting.risk.models import STANDING, RiskDecision, RiskKind, RiskRelationState, RiskStatus
from likes_project.approvals import Approval, ApprovalVoid, params_hash
from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.errors import Conflict, InvalidInput
from relations import selectors as relation_selectors

REQUEST_PERMISSION = "risk.request_riskdecision"
APPROVE_PERMISSION = "risk.approve_riskdecision"
APPLY_JOB = "risk.apply"
EXECUTOR = "risk-executor"
CHUNK = 500  # users per transaction on default
MAX_USERS = 100_000
REASON_MAX = 512
EVIDENCE_MAX = 20_000
APPROVAL = Approval(model=RiskDecision, code="risk", label="risk decision", noun="risk decision",
                    target_type="risk_decision", action="risk.approve", job_kind=APPLY_JOB, executor=EXECUTOR,
                    id_param="riskId", job_target="risk")
risk_get = APPROVAL.get


class RiskNotRestorable(Conflict):
    code = "risk_not_restorable"


# --- input -------------------------------------------------------------------------------------------


def usernames_read(path: str) -> list[str]:
    """The usernames of a users file: one per line; blank lines and `#` comments are skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"Cannot read the users file {path!r}: {exc.__class__.__name__}.",
                           code="users_file_unreadable") from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _users_resolve(usernames: list[str]) -> list[int]:
    names = sorted({u.strip() for u in usernames or [] if u and u.strip()})
    if not names:
        raise InvalidInput("Name at least one user (--user or --users-file).", code="users_required")
    if len(names) > MAX_USERS:
        raise InvalidInput(f"At most {MAX_USERS} users per decision.", code="too_many_users")
    found = dict(get_user_model().objects.filter(username__in=names).values_list("username", "pk"))
    missing = [n for n in names if n not in found]
    if missing:
        raise InvalidInput(f"Unknown users: {', '.join(missing[:10])}" + (" ..." if len(missing) > 10 else ""),
                           code="unknown_user", unknown=missing[:100])
    return sorted(found.values())


def text_checked(value: str | None, *, what: str, code: str, limit: int, required: bool) -> str:
    value = (value or "").strip()
    if required and not value:
        raise InvalidInput(f"A risk decision needs a {what}.", code=code)
    if len(value) > limit:
        raise InvalidInput(f"The {what} is at most {limit} characters.", code=f"{what}_too_long")
    return value


def named_actor(actor: Actor) -> None:
    if actor.channel == "cli" and actor.name.startswith("os:"):
        raise InvalidInput("A risk decision names its operator: --actor USER.", code="actor_required")


# --- request -----------------------------------------------------------------------------------------


def risk_hide_request(*, actor: Actor, video_id: str, usernames: list[str], reason: str,
                      evidence: str = "") -> RiskDecision:
    """AWAITING_APPROVAL: hide these users' relations with the video from its displayed count and its
    likers list. Refused with a code, nothing written, on an unknown video, no or unknown users, no
    reason. Transaction: the decision and its audit record on `default`."""
    reason = text_checked(reason, what="reason", code="reason_required", limit=REASON_MAX, required=True)
    evidence = text_checked(evidence, what="evidence", code="evidence_too_long", limit=EVIDENCE_MAX, required=False)
    named_actor(actor)
    video_id = (video_id or "").strip()
    if not video_id or len(video_id) > 64 or relation_selectors.video_snapshot_get(video_id=video_id) is None:
        raise InvalidInput(f"No video {video_id!r}.", code="video_not_found")
    users = _users_resolve(usernames)
    params = {"kind": RiskKind.HIDE, "video": video_id, "users": users, "reason": reason, "evidence": evidence,
              "restores": None}
    return decision_create(actor, params)


def risk_restore_request(*, actor: Actor, decision_id, reason: str, evidence: str = "") -> RiskDecision:
    """AWAITING_APPROVAL: restore an applied hide (a new decision over the same users, approved the same
    way). Transaction: the decision and its audit record on `default`."""
    reason = text_checked(reason, what="reason", code="reason_required", limit=REASON_MAX, required=True)
    evidence = text_checked(evidence, what="evidence", code="evidence_too_long", limit=EVIDENCE_MAX, required=False)
    named_actor(actor)
    hide = risk_get(decision_id)
    if hide.kind != RiskKind.HIDE or hide.status not in (RiskStatus.APPLIED, RiskStatus.FAILED):
        raise RiskNotRestorable(f"Risk decision {hide.pk} is a {hide.kind} in {hide.status}; only an APPLIED (or "
                                "FAILED) hide can be restored.")
    params = {"kind": RiskKind.RESTORE, "video": hide.video_id, "users": hide.user_ids, "reason": reason,
              "evidence": evidence, "restores": hide.pk}
    return decision_create(actor, params)


def decision_create(actor: Actor, params: dict) -> RiskDecision:
    with transaction.atomic(using="default", durable=True):
        if params["restores"] is not None:
            # One restore at a time per hide: the hide's row serialises two requests.
            RiskDecision.objects.select_for_update().filter(pk=params["restores"]).first()
            if RiskDecision.objects.filter(restores=params["restores"]).exclude(
                    status__in=[RiskStatus.REJECTED, RiskStatus.FAILED]).exists():
                raise RiskNotRestorable(f"Risk decision {params['restores']} already has a restore.")
        decision = RiskDecision.objects.create(
            kind=params["kind"], video_id=params["video"], restores=params["restores"], params=params,
            params_hash=params_hash(params), reason=params["reason"], evidence=params["evidence"],
            requested_by=actor.name, requested_channel=actor.channel)
        audit_record(actor=actor, action=f"risk.{params['kind'].lower()}.request", target_type="risk_decision",
                     target_id=str(decision.pk), params={"video": params["video"], "users": len(params["users"]),
                                                         "restores": params["restores"], "reason": params["reason"],
                                                         "paramsHash": decision.params_hash})
    return decision


# --- approval ----------------------------------------------------------------------------------------


def decision_auto_approve(params: dict, *, by: str) -> RiskDecision:
    """A decision the system requests and approves by its own rule (the risk scorer's verdict on an account, or a
    ring no bigger than RISK_AUTO_MAX_USERS; issue 32 §1): requested by `by`, approved as `auto:<by>` with the next
    risk version, both audited; the caller applies it. Transaction: one on `default`."""
    actor = system_actor(by)
    decision = decision_create(actor, params)
    with transaction.atomic(using="default", durable=True), connections["default"].cursor() as cursor:
        cursor.execute("SELECT nextval('risk_version_seq')")
        version = cursor.fetchone()[0]
        RiskDecision.objects.filter(pk=decision.pk).update(
            status=RiskStatus.APPROVED, approved_by=f"auto:{by}", approved_hash=decision.params_hash,
            approved_at=timezone.now(), risk_version=version)
        audit_record(actor=system_actor(f"auto:{by}"), action="risk.approve", target_type="risk_decision",
                     target_id=str(decision.pk), params={"paramsHash": decision.params_hash, "riskVersion": version,
                                                         "rule": "automatic"})
    return risk_get(decision.pk)


def risk_approve(*, decision_id, actor: Actor) -> RiskDecision:
    """APPROVED by `actor` (never the requester: refused here, with code `self_approval`, and by the
    database), bound to the parameters' hash, with the next risk version; then the system's apply job is
    started (never run in the caller's request)."""
    with transaction.atomic(using="default", durable=True):
        decision = APPROVAL.lock_awaiting(decision_id)
        refused = APPROVAL.refuse_self(decision, actor)
        if refused is None and not APPROVAL.hash_holds(decision):
            audit_record(actor=actor, action="risk.approve", target_type="risk_decision", target_id=str(decision.pk),
                         outcome="refused", params={"reason": "approval_void"})
            refused = ApprovalVoid("The decision's parameters changed after it was requested; request it again.")
        elif refused is None and decision.restores is not None and not RiskDecision.objects.filter(
                pk=decision.restores, status__in=[RiskStatus.APPLIED, RiskStatus.FAILED]).exists():
            refused = RiskNotRestorable(f"The hide {decision.restores} is no longer APPLIED.")
        elif refused is None:  # the database refuses the requester too (risk_not_approved_by_requester)
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT nextval('risk_version_seq')")
                version = cursor.fetchone()[0]
            refused = APPROVAL.record(decision, actor, lambda: RiskDecision.objects.filter(pk=decision.pk).update(
                status=RiskStatus.APPROVED, approved_by=actor.name, approved_hash=decision.params_hash,
                approved_at=timezone.now(), risk_version=version),
                {"paramsHash": decision.params_hash, "riskVersion": version})
    if refused is not None:
        raise refused
    APPROVAL.job_start(decision)
    return risk_get(decision.pk)


def risk_reject(*, decision_id, actor: Actor, reason: str) -> RiskDecision:
    """REJECTED by an approver (the requester may withdraw their own). Transaction: one on `default`."""
    reason = text_checked(reason, what="reason", code="reason_required", limit=REASON_MAX, required=True)
    with transaction.atomic(using="default", durable=True):
        decision = APPROVAL.lock_awaiting(decision_id, step="rejected")
        RiskDecision.objects.filter(pk=decision.pk).update(status=RiskStatus.REJECTED, rejected_by=actor.name,
                                                           finished_at=timezone.now(), error=reason)
        audit_record(actor=actor, action="risk.reject", target_type="risk_decision", target_id=str(decision.pk),
                     params={"reason": reason})
    return risk_get(decision.pk)


# --- execution (the system's job) ----------------------------------------------------------------------


def _desired(decision: RiskDecision, users: list[int]) -> list[tuple[int, bool]]:
    """Per user, hidden or not once this decision holds: a hide hides; a restore shows, except users
    another standing hide of the video covers."""
    if decision.kind == RiskKind.HIDE:
        return [(u, True) for u in users]
    covered: set[int] = set()
    others = (RiskDecision.objects.filter(video_id=decision.video_id, kind=RiskKind.HIDE, status__in=STANDING)
              .exclude(pk=decision.restores).values_list("params", flat=True))
    for params in others:
        covered.update(int(u) for u in params.get("users", []))
    return [(u, u in covered) for u in users]


def _states_write(decision: RiskDecision, rows: list[tuple[int, bool]]) -> None:
    """One chunk: every (video, user)'s state at the decision's risk version, only over an older one.
    Transaction: one on `default`. Idempotency: a re-run writes nothing new (equal version)."""
    now = timezone.now()
    table = RiskRelationState._meta.db_table
    with transaction.atomic(using="default", durable=True), connections["default"].cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} AS s (video_id, user_id, hidden, risk_version, decision_id, updated_at) "
            "SELECT %s, u, h, %s, %s, %s FROM unnest(%s::bigint[], %s::boolean[]) AS t(u, h) ORDER BY u "
            "ON CONFLICT (video_id, user_id) DO UPDATE SET hidden = EXCLUDED.hidden, "
            "risk_version = EXCLUDED.risk_version, decision_id = EXCLUDED.decision_id, "
            "updated_at = EXCLUDED.updated_at WHERE s.risk_version < EXCLUDED.risk_version",
            [decision.video_id, decision.risk_version, decision.pk, now, [u for u, _h in rows],
             [h for _u, h in rows]],
        )


def _mark_dirty(decision: RiskDecision) -> None:
    """A dirty mark (source partition 0, as a repair's) so the display snapshot takes the new hidden
    count. Transaction: one on the count partition of the video's first listed relation."""
    gen = routing.active()
    users = decision.user_ids
    vb = routing.virtual_bucket(gen.space, decision.video_id, users[0])
    alias = gen.routes[vb].partition
    now = timezone.now()
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {DirtyVideo._meta.db_table} AS d (generation, video_id, source_partition, dirty_seq, "
            "first_dirty_at, last_dirty_at) VALUES (%s, %s, 0, 1, %s, %s) ON CONFLICT (generation, video_id, "
            "source_partition) DO UPDATE SET dirty_seq = d.dirty_seq + 1, last_dirty_at = EXCLUDED.last_dirty_at",
            [gen.generation, decision.video_id, now, now])


def risk_apply(decision_id: int, *, start: int = 0, say: Callable[[str], None] | None = None,
               progress: Callable[[int, int], None] | None = None,
               time_left: Callable[[], float | None] | None = None) -> tuple[RiskDecision, int | None]:
    """Apply an approved decision from user index `start`, chunk by chunk. Returns the decision and the
    index to resume from (None: finished, APPLIED).

    Idempotency: every write is version-guarded and the dirty mark only asks for a refresh, so a re-run
    (after a crash, or of a finished decision) gives the same states and the same counts."""
    decision = risk_get(decision_id)
    if decision.risk_version is None:
        raise Conflict(f"Risk decision {decision.pk} is {decision.status}, not approved.", code="risk_not_approved")
    if decision.kind == RiskKind.ACCOUNT:
        raise Conflict(f"Risk decision {decision.pk} sets an account's level: counting.risk.accounts applies it.",
                       code="risk_kind")
    RiskDecision.objects.filter(pk=decision.pk, status__in=[RiskStatus.APPROVED, RiskStatus.FAILED]).update(
        status=RiskStatus.APPLYING, error="")
    users = decision.user_ids
    done = start
    while done < len(users):
        chunk = users[done:done + CHUNK]
        _states_write(decision, _desired(decision, chunk))
        done += len(chunk)
        RiskDecision.objects.filter(pk=decision.pk).update(applied_users=done)
        if progress is not None:
            progress(done, len(users))
        if say is not None:
            say(f"risk {decision.pk}: {done}/{len(users)} users")
        left = time_left() if time_left is not None else None
        if left is not None and left <= 0 and done < len(users):
            return risk_get(decision.pk), done
    _mark_dirty(decision)
    with transaction.atomic(using="default", durable=True):
        if decision.status != RiskStatus.RESTORED:
            RiskDecision.objects.filter(pk=decision.pk).exclude(status=RiskStatus.RESTORED).update(
                status=RiskStatus.APPLIED, finished_at=timezone.now(), applied_users=len(users))
        if decision.restores is not None:
            RiskDecision.objects.filter(pk=decision.restores).update(status=RiskStatus.RESTORED)
        audit_record(actor=system_actor(EXECUTOR), action=f"risk.{decision.kind.lower()}.apply",
                     target_type="risk_decision", target_id=str(decision.pk),
                     params={"video": decision.video_id, "users": len(users), "riskVersion": decision.risk_version,
                             "restores": decision.restores})
    return risk_get(decision.pk), None


def risk_fail(decision_id: int, *, error: str) -> None:
    RiskDecision.objects.filter(pk=decision_id, status__in=[RiskStatus.APPROVED, RiskStatus.APPLYING]).update(
        status=RiskStatus.FAILED, error=error[:4000], finished_at=timezone.now())


# --- reading ---------------------------------------------------------------------------------------------


def risk_hidden_count(decision: RiskDecision) -> int:
    """How many of the decision's relations are hidden now: for a hide while it stands, its users whose
    state is hidden; for a restore, its users still hidden (by another standing hide); otherwise 0."""
    if decision.kind == RiskKind.HIDE and decision.status not in STANDING:
        return 0
    return RiskRelationState.objects.filter(video_id=decision.video_id, user_id__in=decision.user_ids,
                                            hidden=True).count()


def risk_report(decision: RiskDecision) -> dict:
    """What the commands print last with --json."""
    if decision.kind == RiskKind.ACCOUNT:
        return {"riskId": decision.pk, "status": decision.status, "level": decision.params.get("level")}
    return {"riskId": decision.pk, "status": decision.status, "hiddenCount": risk_hidden_count(decision)}


def risk_wait(decision_id: int, *, timeout_s: float = 600.0) -> RiskDecision:
    """Until the decision's job finished (it runs on the workers), bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        decision = risk_get(decision_id)
        if decision.status not in (RiskStatus.APPROVED, RiskStatus.APPLYING) or time.monotonic() >= deadline:
            return decision
        time.sleep(0.5)  # following a job on the workers: poll its row, bounded by timeout_s
