"""Replaying a subscription that fell behind its retention (issue 31 §1): an operator requests it, another
approves it (`likes_project.approvals`), and the system runs it as the ops job `subscription.replay`.

What the job does, in its slices:
1. **Attach.** In one transaction: the subscription turns REPLAYING and gets its checkpoint rows back, per
   partition at `upto` = the higher of where it stood (`after`) and just below what the log still holds (the
   partition's trim bound). From that commit on, trimming and archiving wait for it again, so everything above
   `upto` stays on the log for its ordinary pulls.
2. **Copy.** Every event in (after, upto] of each partition is read back from the archive source the relations
   app registers (its outbox and outbox archive, `eventlog.registry.archive_source`) and written as one of the
   subscription's notices (`like.relation_changed`, the event as the log carried it), served before the log's
   events. Idempotent: a notice is unique per (subscription, eventId), so a slice run twice writes nothing new.
3. **Close the gap a racing trim left.** A trim that had read the checkpoints just before the attach committed
   may have removed entries above `upto`. Once the copy is done (long after any such trim), the partition's trim
   bound is read again; if it passed `upto`, the range up to it is copied too and the checkpoint moved there.
4. **Done.** ACTIVE again, audited with what was copied. Reads answer 409 `subscription_replaying` meanwhile.

A replayed event can be older than one the subscriber already has: it converges by `relationVersion`
(docs/events.md)."""

from __future__ import annotations

import time

from django.db import transaction
from django.utils import timezone

from likes_project.approvals import Approval, ApprovalVoid, params_hash
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import Conflict, InvalidInput
from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint
from likes_project.eventlog.registry import archive_source
from likes_project.opsjobs.services import JobKind, SliceContext
from likes_project.subscriptions.models import (
    ReplayStatus,
    Subscription,
    SubscriptionNotice,
    SubscriptionReplay,
    SubscriptionStatus,
)
from likes_project.subscriptions.services import PERMISSION, acked_positions, subscription_get

S, R = SubscriptionStatus, ReplayStatus
APPROVE_PERMISSION = "subscriptions.approve_subscriptionreplay"
JOB_KIND = "subscription.replay"
EXECUTOR = "subscription-replay"
RELATION_CHANGED = "like.relation_changed"
CHUNK = 2000  # archive rows scanned per read
APPROVAL = Approval(model=SubscriptionReplay, code="replay", label="replay request", noun="replay",
                    target_type="subscription_replay", action="subscription.replay.approve", job_kind=JOB_KIND,
                    executor=EXECUTOR, id_param="replayId", job_target="replay")
replay_get = APPROVAL.get


def _reason(reason) -> str:
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason or len(reason) > 512:
        raise InvalidInput("Say why (1-512 characters).", code="reason_required")
    return reason


def replay_request(*, name: str, actor: Actor, reason: str) -> SubscriptionReplay:
    """AWAITING_APPROVAL: replay a BEHIND_RETENTION subscription from where it stood. One pending request per
    subscription. Transaction: the request and its audit record on `default`."""
    reason = _reason(reason)
    with transaction.atomic(using="default", durable=True):
        sub = Subscription.objects.select_for_update().filter(pk=subscription_get(name).pk).get()
        if sub.status != S.BEHIND_RETENTION:
            raise Conflict(f"Subscription {sub.name} is {sub.status}; only a BEHIND_RETENTION one is replayed.",
                           code="subscription_state")
        if sub.replays.filter(status__in=[R.AWAITING_APPROVAL, R.APPROVED]).exists():
            raise Conflict(f"Subscription {sub.name} has a replay pending already.", code="replay_pending")
        params = {"subscription": sub.name, "reason": reason,
                  "from": {str(p): i for p, i in sorted(acked_positions(sub).items())}}
        row = SubscriptionReplay.objects.create(subscription=sub, params=params, params_hash=params_hash(params),
                                                reason=reason, requested_by=actor.name)
        audit_record(actor=actor, action="subscription.replay.request", target_type="subscription_replay",
                     target_id=str(row.pk), params={**params, "paramsHash": row.params_hash})
    return row


def replay_approve(*, replay_id, actor: Actor) -> SubscriptionReplay:
    """APPROVED by another operator (never the requester: `self_approval`, refused by the database too), bound
    to the parameters' hash; then the system's replay job starts (never in the approver's request)."""
    with transaction.atomic(using="default", durable=True):
        row = APPROVAL.lock_awaiting(replay_id)
        refused = APPROVAL.refuse_self(row, actor)
        if refused is None and not APPROVAL.hash_holds(row):
            audit_record(actor=actor, action=APPROVAL.action, target_type=APPROVAL.target_type,
                         target_id=str(row.pk), outcome="refused", params={"reason": "approval_void"})
            refused = ApprovalVoid()
        elif refused is None and row.subscription.status != S.BEHIND_RETENTION:
            refused = Conflict(f"Subscription {row.subscription.name} is {row.subscription.status} now.",
                               code="subscription_state")
        elif refused is None:
            refused = APPROVAL.record(row, actor, lambda: SubscriptionReplay.objects.filter(pk=row.pk).update(
                status=R.APPROVED, approved_by=actor.name, approved_hash=row.params_hash, approved_at=timezone.now()),
                {"paramsHash": row.params_hash})
    if refused is not None:
        raise refused
    APPROVAL.job_start(row)
    return replay_get(row.pk)


def replay_reject(*, replay_id, actor: Actor, reason: str) -> SubscriptionReplay:
    """REJECTED (nothing is replayed). Transaction: one on `default`."""
    reason = _reason(reason)
    with transaction.atomic(using="default", durable=True):
        row = APPROVAL.lock_awaiting(replay_id, step="rejected")
        SubscriptionReplay.objects.filter(pk=row.pk).update(status=R.REJECTED, rejected_by=actor.name,
                                                            finished_at=timezone.now(), error=reason)
        audit_record(actor=actor, action="subscription.replay.reject", target_type=APPROVAL.target_type,
                     target_id=str(row.pk), params={"reason": reason})
    return replay_get(row.pk)


def replay_wait(replay_id, *, timeout_s: float = 600.0) -> SubscriptionReplay:
    """Until the replay's job finished (it runs on the workers), bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        row = replay_get(replay_id)
        if row.status != R.APPROVED or time.monotonic() >= deadline:
            return row
        time.sleep(0.5)  # following a job on the workers: poll its row, bounded by timeout_s


def replay_report(row: SubscriptionReplay) -> dict:
    return {"replayId": row.pk, "subscription": row.params["subscription"], "status": row.status,
            "from": row.params["from"], "reason": row.reason, "requestedBy": row.requested_by,
            "approvedBy": row.approved_by, "replayed": row.replayed, "error": row.error, "jobId": row.job_id}


# --- the job ---------------------------------------------------------------------------------------------


def _trimmed_upto(partition: int) -> tuple[int, int]:
    """Just below the lowest entry the partition may still hold (its trim bound)."""
    return streams.entry_just_below(streams.entry_id_key(streams.retention(partition).trimmed_below))


def _checkpoints_raise(sub: Subscription, upto: dict[int, str]) -> None:
    for partition, last in upto.items():
        row, created = ConsumerCheckpoint.objects.select_for_update().get_or_create(
            consumer=sub.consumer, partition=partition, defaults={"last_done_id": last})
        if not created and streams.entry_id_key(last) > streams.entry_id_key(row.last_done_id):
            row.last_done_id = last
            row.save(update_fields=["last_done_id", "updated_at"])


def _attach(row: SubscriptionReplay) -> dict:
    """Step 1: REPLAYING, its checkpoints back at `upto`; returns the job's state."""
    after = {int(p): i for p, i in row.params["from"].items()}
    with transaction.atomic(using="default", durable=True):
        sub = Subscription.objects.select_for_update().get(pk=row.subscription_id)
        if sub.status not in (S.BEHIND_RETENTION, S.REPLAYING):
            raise Conflict(f"Subscription {sub.name} is {sub.status}; the replay cannot attach it.",
                           code="subscription_state")
        upto = {p: "{}-{}".format(*max(streams.entry_id_key(after.get(p, "0-0")), _trimmed_upto(p)))
                for p in streams.all_partitions()}
        _checkpoints_raise(sub, upto)
        sub.status, sub.status_changed_at = S.REPLAYING, timezone.now()
        sub.status_reason = f"replay {row.pk} from the archive"
        sub.save(update_fields=["status", "status_reason", "status_changed_at"])
    return {"after": {str(p): after.get(p, "0-0") for p in upto}, "upto": {str(p): i for p, i in upto.items()},
            "scan": {}, "copied": 0}


def _copy(sub: Subscription, entries) -> int:
    entries = sorted(entries, key=lambda e: (streams.entry_id_key(e.entry_id), e.partition))
    now = timezone.now()
    notices = [SubscriptionNotice(subscription=sub, event_id=e.event["eventId"], type=RELATION_CHANGED, at=now,
                                  user_id=e.event.get("userId") if isinstance(e.event.get("userId"), int) else None,
                                  event=e.event) for e in entries]
    with transaction.atomic(using="default", durable=True):
        made = SubscriptionNotice.objects.bulk_create(notices, ignore_conflicts=True)
    return len(made)


def _gap_left(sub: Subscription, state: dict) -> bool:
    """Step 3: a trim that raced the attach passed `upto` somewhere: copy up to its bound too."""
    upto = {int(p): streams.entry_id_key(i) for p, i in state["upto"].items()}
    moved = {p: _trimmed_upto(p) for p in upto if _trimmed_upto(p) > upto[p]}
    if not moved:
        return False
    with transaction.atomic(using="default", durable=True):
        _checkpoints_raise(sub, {p: "{}-{}".format(*k) for p, k in moved.items()})
    state["after"] = {str(p): "{}-{}".format(*upto[p]) for p in upto}
    state["upto"] = {str(p): "{}-{}".format(*moved.get(p, upto[p])) for p in upto}
    state["scan"] = {}
    return True


def _finish(row: SubscriptionReplay, sub: Subscription, copied: int, actor: Actor) -> None:
    with transaction.atomic(using="default", durable=True):
        locked = Subscription.objects.select_for_update().get(pk=sub.pk)
        locked.status, locked.status_changed_at, locked.position = S.ACTIVE, timezone.now(), {}
        locked.status_reason = f"replayed {copied} events from the archive (replay {row.pk})"
        locked.save(update_fields=["status", "status_reason", "status_changed_at", "position"])
        SubscriptionReplay.objects.filter(pk=row.pk).update(status=R.DONE, replayed=copied, finished_at=timezone.now())
        audit_record(actor=actor, action="subscription.replayed", target_type=APPROVAL.target_type,
                     target_id=str(row.pk), params={"subscription": sub.name, "replayed": copied})


def _slice(ctx: SliceContext) -> bool:
    row = replay_get(ctx.params["replayId"])
    try:
        if "upto" not in ctx.state:
            ctx.state.update(_attach(row))
            ctx.say(f"replay {row.pk}: {row.subscription.name} attached at {ctx.state['upto']}")
            ctx.save()
        sub = Subscription.objects.get(pk=row.subscription_id)
        source = archive_source()
        while True:
            after = {int(p): i for p, i in ctx.state["after"].items()}
            upto = {int(p): i for p, i in ctx.state["upto"].items()}
            entries, scan, done = source(after, upto, ctx.state["scan"], CHUNK)
            ctx.state["copied"] += _copy(sub, entries)
            ctx.state["scan"] = scan
            ctx.say(f"replay {row.pk}: {ctx.state['copied']} events copied back")
            ctx.progress(done=ctx.state["copied"])
            if done and not _gap_left(sub, ctx.state):
                break
            left = ctx.time_left()
            if left is not None and left <= 0:
                return False
        _finish(row, sub, ctx.state["copied"], ctx.actor)
    except Exception as exc:
        replay_fail(row.pk, error=f"{exc.__class__.__name__}: {exc}")
        raise
    ctx.result = replay_report(replay_get(row.pk))
    ctx.job.message = f"replay {row.pk}: {ctx.state['copied']} events copied back; {sub.name} is ACTIVE"
    return True


def replay_fail(replay_id: int, *, error: str) -> None:
    """FAILED; a subscription the replay had attached falls back to BEHIND_RETENTION where it stood (the
    notices already copied stay: a new replay skips them)."""
    with transaction.atomic(using="default", durable=True):
        row = SubscriptionReplay.objects.select_for_update().filter(pk=replay_id, status=R.APPROVED).first()
        if row is None:
            return
        SubscriptionReplay.objects.filter(pk=row.pk).update(status=R.FAILED, error=error[:2000],
                                                            finished_at=timezone.now())
        sub = Subscription.objects.select_for_update().get(pk=row.subscription_id)
        if sub.status == S.REPLAYING:
            ConsumerCheckpoint.objects.filter(consumer=sub.consumer).delete()
            sub.status, sub.status_changed_at = S.BEHIND_RETENTION, timezone.now()
            sub.status_reason = f"replay {row.pk} failed: {error[:200]}"
            sub.save(update_fields=["status", "status_reason", "status_changed_at"])


JOB_KINDS = [JobKind(JOB_KIND, APPROVE_PERMISSION, _slice, unit="events",
                     abandon=lambda job, actor, reason: replay_fail(int(job.params.get("replayId", 0)),
                                                                    error=f"its job stopped: {reason}"))]
REQUEST_PERMISSION = PERMISSION
