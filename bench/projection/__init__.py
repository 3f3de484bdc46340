"""The parts of the count-pipeline benchmark (bench/projection_bench.py, run by ./bench/projection.sh):
`naive` (the single-row counter baseline), `roles` (the loops of the spawned pipeline processes), `pool`
(those processes and which plays which role), `state` (data, resets and the checks after a phase),
`phases` (sustained load, drain, backlog replays) and `report`."""

from bench.common import make_log

log = make_log("projection")

LIKED, UNLIKED = "LIKED", "UNLIKED"
# Safety bound: every loop stops at its deadline AND after this many iterations.
MAX_LOOP_ITERATIONS = 2_000_000
