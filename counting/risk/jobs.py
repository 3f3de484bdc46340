"""The ops-job kind of the risk ledger (registered in RiskConfig.ready): the system's application of an
approved hide or restore, chunk by chunk with progress, resumable by its cursor."""

from __future__ import annotations

from counting.risk import accounts, services
from counting.risk.models import RiskKind
from likes_project.audit.services import Actor
from likes_project.opsjobs.services import JobKind, SliceContext


def _apply_slice(ctx: SliceContext) -> bool:
    def progress(done: int, total: int) -> None:
        ctx.state["next"] = done
        ctx.progress(done=done, total=total)

    try:
        if services.risk_get(int(ctx.params["riskId"])).kind == RiskKind.ACCOUNT:  # an account's level: one step
            decision, resume = accounts.account_level_apply(int(ctx.params["riskId"])), None
        else:
            decision, resume = services.risk_apply(int(ctx.params["riskId"]), start=int(ctx.state.get("next", 0)),
                                                   say=ctx.say, progress=progress, time_left=ctx.time_left)
    except Exception as exc:
        services.risk_fail(int(ctx.params["riskId"]), error=f"{exc.__class__.__name__}: {exc}")
        raise
    if resume is not None:
        return False
    ctx.result = services.risk_report(decision)
    ctx.job.message = f"risk {decision.pk}: {decision.status}"
    return True


def _apply_abandon(job, actor: Actor, reason: str) -> None:
    services.risk_fail(int(job.params.get("riskId", 0)), error=f"its job stopped: {reason}")


JOB_KINDS = [JobKind(services.APPLY_JOB, services.APPROVE_PERMISSION, _apply_slice, abandon=_apply_abandon,
                     unit="users")]
