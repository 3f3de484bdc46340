#!/usr/bin/env bash
# Benchmark of the count projector at saturation against the raw SQL ceiling of its own statements (issue 15 §3).
#
#   ./bench/projector.sh [--events 60000] [--rounds 3] [--procs 2,8] [--pgbench-clients 2,4,8] ... (see --help)
#
# A backlog of crafted LikeRelationChanged envelopes in the bench streams, drained by
# consume_partition(CountProjector()) (ours) and by the naive single-row counter in spawned processes, once for
# many videos (uniform) and once for one video (hot); then bench/pgbench/count_group.sql, one projector group as
# raw SQL, with pgbench on one count partition. Same setup and bench databases / Redis namespace as bench/run.sh
# (bench/env.sh, which also takes the one-benchmark-at-a-time lock); only 127.0.0.1 is contacted. Results: the
# table on stdout, bench/results/projector_latest.json and the "Count projector at saturation (issue 15 §3)"
# section of docs/benchmarks.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # lock, setup_all, the bench databases and Redis namespace, PY, bench_drive
# No Celery runs here: nothing may consume the bench streams but this run's consumer processes.
export LIKES_NUDGE_ENABLED="false"
export PGAPPNAME="likes-projector-bench"

bench_drive --setsid --piddir likes-projector-bench --stop-wait 300 --name "projector benchmark" bench.projector_bench "$@"
