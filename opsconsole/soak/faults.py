"""The soak's faults (issue 33 §1), by name (`schedule.FAULTS`): the drills' own injectors (`opsconsole.drills.faults`,
the stage's worker kill), plus a store that hangs instead of refusing. Each `begin` returns what it did and the
`end` that undoes it; a fault that cannot run here is refused before the soak starts (`check`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import redis
from django.conf import settings

from likes_project.redis_client import is_cluster_url
from opsconsole.drills.faults import DatabaseRefusal, DrillRefused, ServerPause, eventlog_flush, second_server_aliases
from opsconsole.drills.stage import Stage
from opsconsole.soak.schedule import SIGNALLED
from relations import routing as relation_routing


def targets() -> dict[str, list[str]]:
    """The aliases each database fault may take down (and the seed text a bucket move picks its buckets by)."""
    return {"relation-shard-down": list(relation_routing.all_aliases()),
            "count-partition-down": list(settings.COUNT_PARTITION_ALIASES),
            "pg-hang": second_server_aliases()[:1],  # the server is what stops; one alias names it
            "bucket-move": [f"move-{i}" for i in range(16)],  # which buckets a move picks, drawn like a target
            "slot-move": [f"move-{i}" for i in range(16)]}  # which slots a move picks


def signals_allowed(stage: Stage) -> bool:
    """Whether the soak may signal the workers: only processes the soak or the test topology started (the suite's
    stage); a deployment's are its supervisor's (the `worker-kill` drill is the operator's tool for those)."""
    return stage.label != "deployment"


def check(names: list[str], stage: Stage) -> None:
    """Refuse (DrillRefused) a fault this deployment cannot take."""
    for name in names:
        if name in SIGNALLED and not signals_allowed(stage):
            raise DrillRefused(f"{name} signals processes the soak did not start; run `manage.py drill {name}` "
                               f"for that, or leave it out of --faults")
        if name in ("relation-shard-down", "count-partition-down"):
            for alias in targets()[name]:
                DatabaseRefusal(alias).check()
        if name == "worker-kill":
            stage.workers_check()
        if name == "pg-hang":
            if not targets()[name]:
                raise DrillRefused("pg-hang stops the second PostgreSQL server, and every database here is on the "
                                   "server of `default` (LIKES_TOPOLOGY=scaled has a second one)")
            ServerPause(targets()[name][0]).check()
        if name == "cache-hang" and is_cluster_url(settings.REDIS_URL):
            raise DrillRefused("cache-hang pauses one Redis server, and the cache role is a Redis Cluster")


def _hang(seconds: float) -> str:
    """CLIENT PAUSE ALL on the cache Redis: it accepts connections and answers nothing until the pause ends (the
    app's socket timeouts fire), unlike a refusal; its data stays. Another role on that server waits too."""
    redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5).execute_command(
        "CLIENT", "PAUSE", max(1, int(seconds * 1000)), "ALL")
    return f"CLIENT PAUSE {seconds:.1f} s ALL on the cache Redis"


def begin(name: str, *, target: str, seconds: float, stage: Stage, videos: list[str]
          ) -> tuple[str, Callable[[], str], Operation | None]:
    """Start fault `name`: what it did, the call that undoes it (an operation's only says where it stands), and the
    operation it started, if any (the soak reports how each ended after the heal)."""
    if name in ("relation-shard-down", "count-partition-down"):
        refusal = DatabaseRefusal(target)
        return refusal.begin(), refusal.end, None
    if name == "pg-hang":
        pause = ServerPause(target)
        return pause.begin(), pause.end, None
    if name == "eventlog-flush":
        return eventlog_flush(), lambda: "nothing to undo: the lost tail is the pipeline's to republish", None
    if name == "cache-hang":
        return _hang(seconds), lambda: "the pause ran out", None
    if name == "worker-kill":
        said = stage.workers_kill()
        return (said, lambda: stage.workers_restart(timeout_s=60) or "the workers were not restarted within 60 s",
                None)
    if name == "beat-stopped":
        return stage.beat_stop(), stage.beat_start, None
    if name in ("bucket-move", "slot-move"):
        what, op = (_bucket_move if name == "bucket-move" else _slot_move)(target)
        return what, op.end, op
    if name in ("snapshot", "reconcile"):
        what, op = _job(name, videos=videos)
        return what, op.end, op
    raise DrillRefused(f"unknown fault {name!r}")


@dataclass
class Operation:
    """An operation a window started: `read()` gives (state, finished, detail) now."""

    kind: str
    pk: int
    read: Callable[[], tuple[str, bool, str]]

    def said(self) -> str:
        state, finished, detail = self.read()
        return f"{self.kind} {self.pk} {state}{'' if finished else ' (unfinished)'}{detail}"

    def end(self) -> str:
        return f"window closed; {self.said()}"


def _bucket_move(seed_text: str) -> tuple[str, Operation]:
    """Plan and approve (two system actors) a move of up to 8 buckets of the busiest partition onto the one with
    the fewest, chosen by the window's seed text; the workers run it."""
    import random

    from counting import routing
    from counting.services.migration.ledger import LEDGER, migration_plan
    from likes_project.audit.services import system_actor

    routing.reset_cache()
    gen, busy = routing.active(), set(LEDGER.units_in_flight())
    aliases = sorted(settings.COUNT_PARTITION_ALIASES, key=lambda a: (len(gen.buckets_on(a)), a))
    source, target = aliases[-1], aliases[0]
    free = [vb for vb in gen.buckets_on(source) if vb not in busy]
    buckets = sorted(random.Random(seed_text).sample(free, min(8, len(free))))
    m = migration_plan(target=target, buckets=buckets, reason="soak: a bucket move under faults",
                       actor=system_actor("soak-planner"))
    return _approved(LEDGER, m, "bucket migration", f"of {buckets} {source} -> {target}")


def _slot_move(seed_text: str) -> tuple[str, Operation]:
    """Plan and approve (two system actors) a move of up to 4 logical slots of the relation shard holding the most
    onto the one holding the fewest, chosen by the window's seed text; the workers run it."""
    import random

    from likes_project.audit.services import system_actor
    from relations import routing
    from relations.services.slot_moves.ledger import LEDGER, move_plan

    routing.reset_cache()
    contract, busy = routing.active_contract(), set(LEDGER.units_in_flight())
    held = {a: [s for s, owner in enumerate(contract.slot_aliases) if owner == a and s not in busy]
            for a in routing.all_aliases()}
    source, target = max(held, key=lambda a: (len(held[a]), a)), min(held, key=lambda a: (len(held[a]), a))
    slots = sorted(random.Random(seed_text).sample(held[source], min(4, len(held[source]))))
    m = move_plan(slots=slots, target=target, reason="soak: a slot move under faults",
                  actor=system_actor("soak-planner"))
    return _approved(LEDGER, m, "slot move", f"of slots {slots} {source} -> {target}")


def _approved(ledger, planned, noun: str, what: str) -> tuple[str, Operation]:
    """Approve `planned` as a second system actor; the operation reads the ledger row until it ends."""
    from likes_project.audit.services import system_actor

    m = ledger.approve(planned.pk, actor=system_actor("soak-approver"))

    def read():
        row = ledger.model.objects.get(pk=m.pk)
        return row.state, row.state in ("RETIRED", "ABORTED", "FAILED"), f": {row.error}" if row.error else ""

    return f"{noun} {m.pk} {what} approved", Operation(noun.split()[-1], m.pk, read)


def _job(name: str, *, videos: list[str]) -> tuple[str, Operation]:
    """A recovery snapshot, or an exact reconciliation of the soak's videos, as an ops job the workers run."""
    from likes_project.audit.services import system_actor
    from likes_project.opsjobs.models import OpsJob
    from likes_project.opsjobs.services import job_start
    from reconciliation.jobs import EXACT_JOB, SNAPSHOT_JOB
    from reconciliation.services.checks import scope_normalize

    params = ({"reason": "soak: a snapshot under faults"} if name == "snapshot" else
              {"mode": "exact", "scope": scope_normalize(videos=videos)})
    job = job_start(kind=SNAPSHOT_JOB if name == "snapshot" else EXACT_JOB, actor=system_actor("soak"), params=params)

    def read():
        row = OpsJob.objects.get(pk=job.pk)
        return row.status, row.finished, f": {row.last_error[:200]}" if row.last_error else ""

    return f"{name} job {job.pk} started", Operation(f"{name} job", job.pk, read)
