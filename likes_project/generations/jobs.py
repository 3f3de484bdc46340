"""Rebuilds as ops jobs: the registry of lifecycles, the ops-job kind that runs a lifecycle, the
foreground runner, and the report a run ends with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from likes_project.audit.services import Actor
from likes_project.generations.engine import generation_abandon, generation_slice, generation_start
from likes_project.generations.lifecycle import Lifecycle, RebuildFailed
from likes_project.generations.models import GenerationModel
from likes_project.generations.models import GenerationStatus as S

# The lifecycles, by kind and by the ops-job kind that runs them.
_LIFECYCLES: dict[str, Lifecycle] = {}
_BY_JOB_KIND: dict[str, Lifecycle] = {}


def lifecycle_register(lc: Lifecycle) -> Lifecycle:
    _LIFECYCLES[lc.kind] = lc
    return lc


def lifecycle_get(kind: str) -> Lifecycle:
    return _LIFECYCLES[kind]


@dataclass(kw_only=True)
class RunReport:
    """A rebuild's report: each field is read from the run's stats, else from the generation row's
    attribute of the same name (or the name ALIASES gives), else its default. Users add their fields."""

    ALIASES = {"failure": "failure_reason", "previous": "previous_generation"}

    generation: int
    status: str
    previous: int | None = None
    failure: str = ""
    sampled: int = 0
    mismatches: int = 0

    @classmethod
    def of(cls, row: GenerationModel):
        values = {}
        for f in fields(cls):
            source = cls.ALIASES.get(f.name, f.name)
            if f.name in row.stats:
                values[f.name] = row.stats[f.name]
            elif hasattr(row, source):
                values[f.name] = getattr(row, source)
        return cls(**values)


def lifecycle_job_kind(lc: Lifecycle, *, job_kind: str, permission: str):
    """The ops-job kind that runs rebuilds of `lc`: the job creates the SHADOW generation (in the
    job's own transaction, so a refused start leaves no job), each slice runs `generation_slice` under
    the lifecycle's lease, and a job whose worker died abandons its generation."""
    from likes_project.opsjobs.services import JobKind, SliceContext

    lifecycle_register(lc)
    _BY_JOB_KIND[job_kind] = lc

    def create(job, actor: Actor) -> None:
        row = generation_start(lc, actor=actor, params=job.params, job_id=job.pk)
        job.state["generation"] = row.generation
        job.target = f"{lc.target_type}:{row.generation}"

    def run_slice(ctx: SliceContext) -> bool:
        generation = ctx.job.state["generation"]

        def on_chunk(row: GenerationModel) -> None:
            steps = row.progress.get("steps", {})
            total = (steps.get("backfill") or {}).get("total")
            ctx.progress(done=sum(s.get("done", 0) for s in steps.values()), total=total)

        finished = generation_slice(lc, generation, grant=ctx.grant, actor=ctx.actor, say=ctx.say,
                                    budget_s=ctx.time_left(), max_chunks=ctx.max_chunks, on_chunk=on_chunk)
        if finished:
            row = lc.model.objects.get(pk=generation)
            ctx.result = {"generation": generation, "status": row.status, "failure": row.failure_reason,
                          "stats": row.stats}
            if row.status != S.ACTIVE:
                raise RebuildFailed(f"generation {generation} ended {row.status}: {row.failure_reason}")
        return finished

    def abandon(job, actor: Actor, reason: str) -> None:
        if "generation" in job.state:
            generation_abandon(lc, job.state["generation"], actor=actor, reason=f"abandoned: {reason}")

    return JobKind(kind=job_kind, permission=permission, run_slice=run_slice, create=create, abandon=abandon,
                   lease_resource=lambda job: lc.lease_resource, unit="rows")


def rebuild_inline(job_kind: str, *, actor: Actor, params: dict | None = None,
                   say: Callable[[str], None] | None = None, on_progress=None) -> GenerationModel:
    """Start a rebuild job and run it to its end in this process (a command's foreground, a test).
    Returns the generation row as it ended (ACTIVE or FAILED)."""
    from likes_project.opsjobs.services import job_run_inline, job_start

    job = job_start(kind=job_kind, actor=actor, params=params)
    return generation_of_job(job_run_inline(job.pk, on_say=say, on_progress=on_progress))


def generation_of_job(job) -> GenerationModel:
    """The generation row a rebuild job built (as it is now)."""
    return _BY_JOB_KIND[job.kind].model.objects.get(pk=job.state["generation"])
