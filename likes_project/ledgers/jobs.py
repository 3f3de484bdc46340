"""The ops-job kind of an approved ledger: a thin adapter that runs the ledger's protocol from its state. A worker
that died leaves the ledger where it was; the job's `abandon` starts the next job, which resumes from the ledger's
cursor (every step is idempotent). An app registers `ledger_job_kind(LEDGER, run)` among its job kinds."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from likes_project.audit.services import Actor
from likes_project.ledgers.model import ApprovedLedgerModel
from likes_project.ledgers.service import ApprovedLedger
from likes_project.opsjobs.services import TRANSIENT, JobKind, SliceContext

logger = logging.getLogger(__name__)
Run = Callable[..., ApprovedLedgerModel]  # run(ledger_id, *, say, tick): the protocol from the ledger's state


def ledger_job_kind(ledger: ApprovedLedger, run: Run) -> JobKind:
    """The job that runs `run` for the ledger named by its `id_param`, showing the ledger's progress: the rows
    copied plus what `ledger.progress_fields` counts (replayed events, captured changes applied)."""

    def progress(ctx: SliceContext, m: ApprovedLedgerModel) -> None:
        done = m.copied_rows + sum(ledger.progress_fields(m).values())
        ctx.progress(done=done, total=max(m.rows_to_copy, 1))

    def run_slice(ctx: SliceContext) -> bool:
        ledger_id = int(ctx.params[ledger.id_param])
        shown = [0.0]

        def say(message: str) -> None:
            m = ledger.get(ledger_id)
            ctx.say(f"{ledger.noun} {m.pk} {m.state}: {message}")
            progress(ctx, m)

        def tick(m: ApprovedLedgerModel) -> None:
            # Every ledger save: at most once a second, the job's progress saved and its lease renewed (a long
            # copy must never look like a dead worker to the sweeper).
            if time.monotonic() - shown[0] >= 1.0:
                shown[0] = time.monotonic()
                progress(ctx, m)

        try:
            m = run(ledger_id, say=say, tick=tick)
        except TRANSIENT as exc:
            # The step resumes where it stands, so the job waits and runs it again instead of leaving the ledger
            # for an operator to resume; the ledger says it is waiting.
            error = f"{exc.__class__.__name__}: {exc}"[:4000]

            def waiting(tries: int) -> None:
                ledger.model.objects.filter(pk=ledger_id).update(error=f"waiting for a store (try {tries}): {error}")

            if not ctx.transient_wait(exc, what=f"{ledger.noun} {ledger_id}", waiting=waiting):
                ledger.model.objects.filter(pk=ledger_id).update(error=error)
                raise
            return False
        except Exception as exc:
            # The job fails; the ledger stays in its state (every step resumes) and says why it stopped.
            ledger.model.objects.filter(pk=ledger_id).update(error=f"{exc.__class__.__name__}: {exc}"[:4000])
            raise
        if m.error.startswith("waiting for a store"):
            ledger.model.objects.filter(pk=ledger_id, error=m.error).update(error="")
        ctx.result = {ledger.id_param: m.pk, "status": m.state, "writePauseMs": m.write_pause_ms,
                      "copiedRows": m.copied_rows, **ledger.progress_fields(m), "error": m.error or None}
        ctx.job.message = f"{ledger.noun} {m.pk}: {m.state}" + (f" ({m.error[:300]})" if m.error else "")
        return True

    def abandon(job, actor: Actor, reason: str) -> None:
        m = ledger.model.objects.filter(pk=job.params.get(ledger.id_param)).first()
        if m is None or m.finished:
            return
        ledger.model.objects.filter(pk=m.pk).update(error=f"its job {job.pk} stopped: {reason}"[:4000])
        try:
            ledger.resume(m.pk, actor=actor)
        except Exception:  # the operator resumes it by hand; the ledger says where it stands
            logger.exception("%s %s could not be resumed after its job %s stopped", ledger.noun, m.pk, job.pk)

    return JobKind(ledger.job_kind, ledger.approve_permission, run_slice, abandon=abandon, unit="rows",
                   single_slice=True)
