"""The soak's faults (issue 33 §1), by name (`schedule.FAULTS`): the drills' own injectors (`opsconsole.drills.faults`,
the stage's worker kill), plus a store that hangs instead of refusing. Each `begin` returns what it did and the
`end` that undoes it; a fault that cannot run here is refused before the soak starts (`check`)."""

from __future__ import annotations

from collections.abc import Callable

import redis
from django.conf import settings

from likes_project.redis_client import is_cluster_url
from opsconsole.drills.faults import DatabaseRefusal, DrillRefused, eventlog_flush
from opsconsole.drills.stage import Stage
from relations import routing as relation_routing


def targets() -> dict[str, list[str]]:
    """The aliases each database fault may take down."""
    return {"relation-shard-down": list(relation_routing.all_aliases()),
            "count-partition-down": list(settings.COUNT_PARTITION_ALIASES)}


def check(names: list[str], stage: Stage) -> None:
    """Refuse (DrillRefused) a fault this deployment cannot take."""
    for name in names:
        for alias in targets().get(name, []):
            DatabaseRefusal(alias).check()
        if name == "worker-kill":
            stage.workers_check()
        if name == "cache-hang" and is_cluster_url(settings.REDIS_URL):
            raise DrillRefused("cache-hang pauses one Redis server, and the cache role is a Redis Cluster")


def _hang(seconds: float) -> str:
    """CLIENT PAUSE ALL on the cache Redis: it accepts connections and answers nothing until the pause ends (the
    app's socket timeouts fire), unlike a refusal; its data stays. Another role on that server waits too."""
    redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5).execute_command(
        "CLIENT", "PAUSE", max(1, int(seconds * 1000)), "ALL")
    return f"CLIENT PAUSE {seconds:.1f} s ALL on the cache Redis"


def begin(name: str, *, target: str, seconds: float, stage: Stage) -> tuple[str, Callable[[], str]]:
    if name in ("relation-shard-down", "count-partition-down"):
        refusal = DatabaseRefusal(target)
        return refusal.begin(), refusal.end
    if name == "eventlog-flush":
        return eventlog_flush(), lambda: "nothing to undo: the lost tail is the pipeline's to republish"
    if name == "cache-hang":
        return _hang(seconds), lambda: "the pause ran out"
    if name == "worker-kill":
        said = stage.workers_kill()
        return said, lambda: stage.workers_restart(timeout_s=60) or "the workers were not restarted within 60 s"
    raise DrillRefused(f"unknown fault {name!r}")
