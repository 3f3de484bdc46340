"""The ops-job kind of a virtual-bucket migration (registered in CountingConfig.ready): a thin adapter that
runs the protocol from the ledger's state. A worker that died leaves the ledger where it was; the job's
`abandon` starts the next job, which resumes from the ledger's cursor (the protocol is idempotent)."""

from __future__ import annotations

import logging
import time

from counting.models import BucketMigration
from counting.services.migration import ledger, protocol
from likes_project.audit.services import Actor
from likes_project.opsjobs.services import JobKind, SliceContext

logger = logging.getLogger(__name__)


def _migration_slice(ctx: SliceContext) -> bool:
    shown = [0.0]

    def say(message: str) -> None:
        m = BucketMigration.objects.get(pk=ctx.params["migrationId"])
        ctx.say(f"migration {m.pk} {m.state}: {message}")
        ctx.progress(done=m.copied_rows + m.replayed_events, total=max(m.rows_to_copy, 1))

    def tick(m: BucketMigration) -> None:
        # Every ledger save: at most once a second, the job's progress saved and its lease renewed (a long
        # copy must never look like a dead worker to the sweeper).
        if time.monotonic() - shown[0] >= 1.0:
            shown[0] = time.monotonic()
            ctx.progress(done=m.copied_rows + m.replayed_events, total=max(m.rows_to_copy, 1))

    try:
        m = protocol.migration_run(int(ctx.params["migrationId"]), say=say, tick=tick)
    except Exception as exc:
        # The job fails; the ledger stays in its state (every step resumes) and says why it stopped.
        BucketMigration.objects.filter(pk=ctx.params["migrationId"]).update(
            error=f"{exc.__class__.__name__}: {exc}"[:4000])
        raise
    ctx.result = {"migrationId": m.pk, "status": m.state, "writePauseMs": m.write_pause_ms,
                  "copiedRows": m.copied_rows, "replayedEvents": m.replayed_events, "error": m.error or None}
    ctx.job.message = f"migration {m.pk}: {m.state}" + (f" ({m.error[:300]})" if m.error else "")
    return True


def _migration_abandon(job, actor: Actor, reason: str) -> None:
    m = BucketMigration.objects.filter(pk=job.params.get("migrationId")).first()
    if m is None or m.finished:
        return
    BucketMigration.objects.filter(pk=m.pk).update(error=f"its job {job.pk} stopped: {reason}"[:4000])
    try:
        ledger.migration_resume(migration_id=m.pk, actor=actor)
    except Exception:  # the operator resumes it by hand; the ledger says where it stands
        logger.exception("migration %s could not be resumed after its job %s stopped", m.pk, job.pk)


JOB_KINDS = [
    JobKind(ledger.MIGRATION_JOB, ledger.APPROVE_PERMISSION, _migration_slice, abandon=_migration_abandon,
            unit="rows", single_slice=True),
]
