"""What the approved, job-run ledgers (virtual-bucket migrations, relation slot moves) share: the one audited
compare-and-set transition through a table of allowed moves, and following a ledger's job until it ends."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import models, transaction
from django.utils import timezone

from likes_project.audit.services import Actor, audit_record
from likes_project.errors import Conflict


def ledger_transition(row: models.Model, to: str, *, transitions: dict[str, frozenset[str]],
                      terminal: frozenset[str], refused: type[Conflict], what: str, target_type: str, actor: Actor,
                      params: dict | None = None, **fields) -> models.Model:
    """Move `row` to `to` if `transitions` allows it and the row is still in the state it was read in (a CAS: two
    runners cannot both move it), audited as "<target_type>.<to>" in the same transaction (the caller's on
    `default`, if any). `refused` is raised otherwise; `what` names the row in its message ("migration 3")."""
    if to not in transitions[row.state]:
        raise refused(f"{what}: {row.state} -> {to} is not a transition of the protocol")
    now = timezone.now()
    if to in terminal:
        fields.setdefault("finished_at", now)
    with transaction.atomic(using="default"):
        moved = type(row).objects.filter(pk=row.pk, state=row.state).update(state=to, state_changed_at=now, **fields)
        if not moved:
            raise refused(f"{what} is no longer {row.state}")
        audit_record(actor=actor, action=f"{target_type}.{to.lower()}", target_type=target_type,
                     target_id=str(row.pk), params={"from": row.state, **(params or {})})
    row.refresh_from_db()
    return row


def ledger_wait(get: Callable[[], models.Model], *, timeout_s: float, on_change=None) -> models.Model:
    """Until the ledger row `get()` returns is finished, or its job ended with it waiting; bounded."""
    from likes_project.opsjobs.models import OpsJob

    deadline, seen = time.monotonic() + timeout_s, None
    while True:
        row = get()
        if row.state != seen and on_change is not None:
            on_change(row)
        seen = row.state
        job = OpsJob.objects.filter(pk=row.job_id).first()
        if row.finished or time.monotonic() >= deadline or (job is not None and job.finished):
            return row
        time.sleep(0.5)  # following a job on the workers: poll its ledger row, bounded by timeout_s
