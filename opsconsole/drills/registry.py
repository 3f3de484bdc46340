"""The drills `manage.py drill` and the test suite can run, as the apps register them
(`drill_register` in their AppConfig.ready)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from opsconsole.drills.scenarios import Drill

_DRILLS: dict[str, type[Drill]] = {}
# name -> the drill's class, in the order registered; a run makes its own instance (it keeps the run's
# injector). Read-only: register instead.
DRILLS: Mapping[str, type[Drill]] = MappingProxyType(_DRILLS)


# Spec §7's fault drills by number (the short title each is listed under by `manage.py drill --list`); a drill class
# names the numbers it runs (`Drill.spec_numbers`). Drills beyond this list (a database down, a subscription stall)
# name none.
SPEC_DRILLS: Mapping[int, str] = MappingProxyType({
    1: "relation Redis shut down: DB fallback protection, read-your-write",
    2: "outbox publisher paused: commands succeed, the backlog alert fires",
    3: "one event-log partition unavailable: retries, partition skew",
    4: "a process killed before and after the projection commit: nothing applied twice",
    5: "relation Redis flushed, then old-generation and low-version backfills: DB fallback, version floors",
    6: "count Redis flushed: a new generation built from the durable buckets",
    7: "v12 before v11, v13 skipping v12: count and reverse projections",
    8: "a snapshot with work in flight, a rebalance, a missing or regressed offset, log expiry: refused",
    9: "a recovery artifact deleted or tampered with, a manifest missing a bucket: never SEALED",
    10: "hash seed, key encoding, V or R changed: old generations unchanged, a shadow generation to switch",
    11: "a crash in every migration phase, scale-out and scale-in",
    12: "an old-epoch write after the route CAS: the source fenced, the retry at the target",
    13: "one hot video's bucket skew: a bucket move or the degradation plan",
    14: "shadow repair during live consumption: no overwrites, the coverage rules",
    15: "live paging under churn: only popped items advance the cursor",
})


def drill_register(drill: type[Drill]) -> type[Drill]:
    """Make `drill` runnable by its name."""
    _DRILLS[drill.name] = drill
    return drill
