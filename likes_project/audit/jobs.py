"""The ops-job kind that verifies the audit chain (registered in AuditConfig.ready): the console starts it,
`manage.py audit_verify` runs it in the foreground. The walk is the job's cursor (`job.state`), so a long
log is checked in slices; the last slice records the verdict."""

from __future__ import annotations

from likes_project.audit import selectors
from likes_project.audit.services import VERIFY_PERMISSION, Actor, chain_verification_record
from likes_project.opsjobs.services import JobKind, SliceContext

VERIFY_JOB = "audit.verify_chain"
SAY_EVERY_ROWS = 100_000


def _verify_create(job, actor: Actor) -> None:
    # Inside job_start's transaction: a bad --since refuses the job and nothing is written.
    job.state = selectors.chain_walk_begin(since=job.params.get("since"))
    job.total = max(0, job.state["headSeq"] - job.state["startSeq"] + 1)
    job.target = f"audit chain from seq {job.state['startSeq']}"


def _verify_slice(ctx: SliceContext) -> bool:
    state = ctx.job.state
    said = {"at": state["checked"] // SAY_EVERY_ROWS}

    def on_page(current: dict) -> None:
        if current["checked"] // SAY_EVERY_ROWS > said["at"]:
            said["at"] = current["checked"] // SAY_EVERY_ROWS
            ctx.say(f"checked {current['checked']} of {ctx.job.total} rows (seq {current['nextSeq'] - 1})")
        ctx.progress(done=current["checked"])

    state = selectors.chain_walk_step(state, deadline=ctx.deadline, on_page=on_page)
    ctx.job.state = state
    if not state["done"]:
        ctx.progress(done=state["checked"])
        return False
    report = selectors.chain_report(state)
    verification = chain_verification_record(report=report, actor=ctx.actor, job_id=ctx.job.pk)
    ctx.result = {**report, "verificationId": verification.pk}
    broken = report["firstBroken"]
    ctx.job.done = state["checked"]
    ctx.job.message = (f"BROKEN at seq {broken['seq']}: {broken['problem']}"[:512] if broken else
                       f"intact: seq {state['startSeq']}..{state['headSeq']} ({state['checked']} rows)")
    return True


JOB_KINDS = [JobKind(VERIFY_JOB, VERIFY_PERMISSION, _verify_slice, create=_verify_create, unit="rows")]
