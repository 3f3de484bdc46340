"""The diff workflow (issue 11 §1): NEW -> FIXING -> FIXED or IGNORED (and back to NEW), every change
with its owner, reason and time, in the transaction of the change, audited."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from likes_project.audit.services import Actor, audit_record
from likes_project.errors import Conflict, InvalidInput
from reconciliation.models import DIFF_TRANSITIONS, CheckDiff, DiffStatus, DiffTransition

TRIAGE_PERMISSION = "reconciliation.triage_diff"


class DiffTransitionRefused(Conflict):
    code = "diff_transition_refused"


class DiffChanged(Conflict):
    code = "diff_changed"


def diff_transition(diff: CheckDiff, *, to: str, actor: Actor, reason: str = "") -> CheckDiff:
    """Move `diff` to `to` if the workflow allows it. Must run inside the caller's transaction on
    `default` (or opens its own)."""
    if to not in DIFF_TRANSITIONS.get(diff.status, ()):
        raise DiffTransitionRefused(f"Diff {diff.pk} is {diff.status}; it cannot become {to}.")
    with transaction.atomic(using="default"):
        now = timezone.now()
        updated = CheckDiff.objects.filter(pk=diff.pk, status=diff.status).update(
            status=to, owner=actor.name, reason=reason[:512], status_changed_at=now)
        if not updated:
            raise DiffChanged(f"Diff {diff.pk} changed meanwhile; look again.")
        DiffTransition.objects.create(diff=diff, from_status=diff.status, to_status=to, actor=actor.name,
                                      reason=reason[:512])
        audit_record(actor=actor, action=f"diff.{to.lower()}", target_type="diff", target_id=str(diff.pk),
                     params={"from": diff.status, "reason": reason[:512], "videoId": diff.video_id})
    diff.refresh_from_db()
    return diff


def diff_link_repair(diff: CheckDiff, *, repair_id: int, actor: Actor) -> CheckDiff:
    """A repair was requested for this diff: FIXING (if it was NEW), linked to the repair."""
    CheckDiff.objects.filter(pk=diff.pk).update(repair_id=repair_id)
    diff.refresh_from_db()
    if diff.status == DiffStatus.NEW:
        return diff_transition(diff, to=DiffStatus.FIXING, actor=actor, reason=f"repair {repair_id} requested")
    return diff


def diffs_set_status(*, ids: list[int], to: str, actor: Actor, reason: str) -> list[CheckDiff]:
    """The admin's and the CLI's triage: every diff of `ids` to `to` with the reason, or none."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("Give a reason.", code="reason_required")
    with transaction.atomic(using="default", durable=True):
        found = list(CheckDiff.objects.select_for_update().filter(pk__in=ids).order_by("pk"))
        if len(found) != len(set(ids)):
            raise InvalidInput("No such diff.", code="diff_not_found")
        return [diff_transition(d, to=to, actor=actor, reason=reason) for d in found]
