"""Account deletion (issue 5 §3): the account is hidden at once, then every like it holds is withdrawn
by a versioned UNLIKED command, so counts and the likers index converge through the normal projectors. The ops
job then erases the user id from what is kept (issue 31 §4: `relations.services.erasure`).

Why a late like cannot resurface: (1) AccountStatus=deleted is committed FIRST, and every read path
(likers merge, another user's liked list) hides non-active accounts; (2) each withdrawal is a new
relation version, so a like event published before the deletion but consumed after it carries a LOWER
version and the projectors keep the UNLIKED state (version-gated apply, REV-2 / count projection).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import connections, transaction
from rest_framework.authtoken.models import Token

from likes_project.audit.services import Actor, audit_record
from likes_project.errors import DomainError
from likes_project.nudge import nudge
from likes_project.subscriptions.services import subscriptions_notify_account_deleted
from relations import routing
from relations.errors import UserNotFound
from relations.models import AccountStatus, AccountStatusValue, LikeRelation, RelationState
from relations.services import commands

logger = logging.getLogger(__name__)

ACCOUNT_DELETE_PERMISSION = "relations.change_accountstatus"
ACCOUNT_DELETE_JOB = "account.delete"  # the ops job that withdraws, then erases (relations.jobs)
DEFAULT_PROGRESS_EVERY = 100
SCAN_CHUNK = 500
FAILED_VIDEOS_KEPT = 20


@dataclass(frozen=True)
class AccountDeleteResult:
    user_id: int
    alias: str
    already_deleted: bool  # the account was marked deleted before this run
    scanned: int  # LIKED relations found on the shard
    unliked: int  # of them, withdrawn by this run (a re-run finds none)
    skipped: int  # of them, found already withdrawn when this run reached them (a concurrent run)
    failed: int  # of them, refused by a domain rule and left LIKED (listed in the audit record)


# The deletion's operation ids live in a namespace of their own: `/` is outside the API's
# Idempotency-Key alphabet (relations.validation.OPERATION_ID_RE), so no client can plant a command under
# one of these ids (issue 10 §1); and the deletion never looks a user command up by id anyway.
SYSTEM_OPERATION_PREFIX = "sys/"


def delete_operation_id(user_id: int, video_id: str) -> str:
    return f"{SYSTEM_OPERATION_PREFIX}account-delete/{user_id}/{video_id}"


def _unlike(*, user_id: int, video_id: str) -> bool:
    """Withdraw one like through the system path; returns whether this call changed the relation.

    The user's command space is never consulted: no replay by operation id (a stored user command
    cannot stand in for the withdrawal), no per-relation limiter (deletion is a system action that must
    finish; nothing process-wide is flipped), no authorisation (withdrawing is always allowed). The same
    durable transaction as any unlike is applied (`commands._apply`: CAS, versioned UNLIKED outbox event,
    command record under the system id), so projections converge as for any unlike (PRIV-5).
    """
    try:
        alias, out = commands._apply(user_id=user_id, video_id=video_id, desired_state=RelationState.UNLIKED,
                                     operation_id=delete_operation_id(user_id, video_id), base_version=None,
                                     device_id="", client_sequence=None)
    except commands._DuplicateOperation:
        return False  # this withdrawal id already committed (a concurrent or earlier run of the deletion)
    commands.count_command("account_delete" if out.changed else "account_delete_noop", RelationState.UNLIKED)
    if out.changed:
        nudge("relations.publish_outbox", alias)
    return out.changed


def account_mark_deleted(*, user_id: int, actor: Actor) -> bool:
    """Hide the account at once: AccountStatus deleted, login disabled, API token removed, audited
    ("account.delete"). Returns whether it was already marked. Must run inside the caller's
    transaction on `default` (the ops job that withdraws the likes is created in the same one)."""
    User = get_user_model()
    user = User.objects.select_for_update().filter(pk=user_id).first()
    if user is None:
        raise UserNotFound()
    status, _ = AccountStatus.objects.select_for_update().get_or_create(user_id=user_id)
    already = status.status == AccountStatusValue.DELETED
    if not already:
        status.status = AccountStatusValue.DELETED
        status.save(update_fields=["status", "updated_at"])
        subscriptions_notify_account_deleted(user_id=user_id)  # every downstream erases the user (PRIV-4)
    if user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])
    Token.objects.filter(user_id=user_id).delete()
    # The outcome of this record is the marking; the withdrawal's own outcome (unliked, skipped, failed)
    # is a second record, `account.delete.withdrawn`, written when the withdrawal ends.
    audit_record(actor=actor, action="account.delete", target_type="user", target_id=str(user_id),
                 params={"username": user.get_username()}, outcome="resumed" if already else "marked")
    return already


@dataclass
class WithdrawProgress:
    """Where a withdrawal stands: the last video id handled (keyset) and the counts so far."""

    last: str = ""
    scanned: int = 0
    unliked: int = 0
    skipped: int = 0
    failed: int = 0
    failed_videos: list[str] = field(default_factory=list)  # the first FAILED_VIDEOS_KEPT of them
    finished: bool = False

    def as_state(self) -> dict:
        return {"last": self.last, "scanned": self.scanned, "unliked": self.unliked, "skipped": self.skipped,
                "failed": self.failed, "failed_videos": list(self.failed_videos)}

    @classmethod
    def from_state(cls, st: dict) -> WithdrawProgress:
        return cls(st.get("last", ""), st.get("scanned", 0), st.get("unliked", 0), st.get("skipped", 0),
                   st.get("failed", 0), list(st.get("failed_videos", ())))


def account_withdrawal_audit(*, user_id: int, actor: Actor, at: WithdrawProgress) -> None:
    """Record what the withdrawal really did: `applied` when every like found was withdrawn (by this run
    or found withdrawn), `partial` when some were refused and stay LIKED (their video ids are listed)."""
    with transaction.atomic(using="default", durable=True):
        audit_record(actor=actor, action="account.delete.withdrawn", target_type="user", target_id=str(user_id),
                     params={"scanned": at.scanned, "unliked": at.unliked, "skipped": at.skipped,
                             "failed": at.failed, "failed_videos": at.failed_videos},
                     outcome="partial" if at.failed else "applied")


def account_likes_withdraw_chunk(*, user_id: int, at: WithdrawProgress, limit: int = SCAN_CHUNK) -> WithdrawProgress:
    """Withdraw the next `limit` LIKED relations of a deleted account after `at.last`, each with its own
    versioned UNLIKED command. Keyset by video_id over the (user_id, video_id) unique index; rows this
    run unlikes drop out of the LIKED filter, which the keyset does not depend on.

    Idempotency: each withdrawal uses the system operation id `sys/account-delete/<user>/<video>`; a
    relation a redone chunk finds withdrawn already is skipped. A domain error on one relation (a rule
    refusing it) is counted as failed and the run goes on; a store error propagates (the job slice fails
    and a re-run resumes)."""
    alias = routing.alias_for_user(user_id)
    chunk = list(LikeRelation.objects.using(alias).filter(user_id=user_id, state=RelationState.LIKED,
                                                          video_id__gt=at.last)
                 .order_by("video_id").values_list("video_id", flat=True)[:limit])
    out = WithdrawProgress.from_state(at.as_state())
    out.finished = not chunk
    for video_id in chunk:
        out.scanned += 1
        out.last = video_id
        try:
            changed = _unlike(user_id=user_id, video_id=video_id)
        except DomainError as exc:
            logger.warning("account %s: withdrawing the like of %s refused: %s", user_id, video_id, exc.code)
            out.failed += 1
            if len(out.failed_videos) < FAILED_VIDEOS_KEPT:
                out.failed_videos.append(video_id)
            continue
        out.unliked += changed
        out.skipped += not changed
    return out


def account_delete(*, user_id: int, actor: Actor, progress: Callable[[int, int], None] | None = None,
                   progress_every: int = DEFAULT_PROGRESS_EVERY) -> AccountDeleteResult:
    """Delete an account's likes in this process: mark it deleted (hidden from reads at once, login
    disabled, API token removed), then withdraw every LIKED relation with a versioned UNLIKED command.
    The admin and `delete_account` run the same steps as an ops job (`account.delete`), which then, once the
    pipeline has applied the withdrawal, erases the user id (`relations.services.erasure`, then every registered
    eraser); this in-process variant stops after the withdrawal.

    Transaction: first one durable transaction on `default` (status, user.is_active, token, audit
    record); then one durable transaction per relation on the user's shard (the like command's own).
    Idempotency: a re-run (or a run resumed after a crash) replays finished withdrawals and only
    handles relations still LIKED. `progress(done, scanned)` is called every `progress_every`
    relations and once at the end.
    """
    with transaction.atomic(using="default", durable=True):
        already = account_mark_deleted(user_id=user_id, actor=actor)
    at = WithdrawProgress()
    reported = 0
    while not at.finished:
        at = account_likes_withdraw_chunk(user_id=user_id, at=at, limit=max(1, min(SCAN_CHUNK, progress_every)))
        if progress is not None and at.scanned - reported >= progress_every:
            reported = at.scanned
            progress(at.unliked, at.scanned)
    if progress is not None and at.scanned != reported:
        progress(at.unliked, at.scanned)
    account_withdrawal_audit(user_id=user_id, actor=actor, at=at)
    logger.info("account %s deleted: %s of %s likes withdrawn, %s skipped, %s failed", user_id, at.unliked,
                at.scanned, at.skipped, at.failed)
    return AccountDeleteResult(user_id=user_id, alias=routing.alias_for_user(user_id), already_deleted=already,
                               scanned=at.scanned, unliked=at.unliked, skipped=at.skipped, failed=at.failed)


def account_risk_level_set(*, user_id: int, level: str, risk_version: int) -> bool:
    """Set the account's risk level (issue 32 §1) as of `risk_version` (a decision's, from `risk_version_seq`): only
    over an older version, so decisions applied out of order, or twice, end as the newest says. True when it
    changed. Transaction: one statement on `default` (the row is made when the account has none)."""
    table = AccountStatus._meta.db_table
    with transaction.atomic(using="default", durable=True), connections["default"].cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} AS a (user_id, status, risk_level, risk_version, updated_at) "
            "VALUES (%s, %s, %s, %s, now()) ON CONFLICT (user_id) DO UPDATE SET risk_level = EXCLUDED.risk_level, "
            "risk_version = EXCLUDED.risk_version, updated_at = EXCLUDED.updated_at "
            "WHERE a.risk_version < EXCLUDED.risk_version",
            [user_id, AccountStatusValue.ACTIVE, level, risk_version])
        return cursor.rowcount == 1
