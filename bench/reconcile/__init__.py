"""The parts of the reconciliation benchmark (bench/reconcile_bench.py, run by ./bench/reconcile.sh): `seed`
(a million relations written straight into every layer, consistently), `baselines` (the naive per-video
COUNT(*) comparison and the raw SQL ceiling), `roles` (the loops of the spawned processes: the tracked command
load and the checker), `pool` (those processes and who plays what), `phases` (coverage, exact, repair) and
`report`."""

from bench.common import make_log

log = make_log("reconcile")

# Safety bound: every loop stops at its deadline AND after this many iterations.
MAX_LOOP_ITERATIONS = 2_000_000

SEED_VIDEO_PREFIX = "bench-rec-v"
SEED_HOT_VIDEO = "bench-rec-hot"
SEED_USER_PREFIX = "bench-r"
OPERATOR = "bench-rec-operator"  # requests repairs, starts check runs
APPROVER = "bench-rec-approver"  # approves them (maker-checker: another person)
