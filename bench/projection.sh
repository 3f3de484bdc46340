#!/usr/bin/env bash
# Benchmark of the asynchronous count pipeline (issue #3 "Benchmark"; spec TEST-3).
#
#   ./bench/projection.sh [--duration 15] [--warmup 3] [--procs 4] [--projectors 2] ...   (see --help)
#
# Sustained like/unlike load through relation_set_state while, in the same run, the outbox publishers,
# the count projectors (the shared consumer framework) and the display snapshot job loop in their own
# processes (plain loops, no Celery), then a drain, an exactness check against the relation facts, and
# a backlog replay that measures the projector's own capacity next to a naive single-row counter.
# Same setup and the same bench databases / Redis namespace as bench/run.sh (bench/env.sh); only
# 127.0.0.1 is contacted. Results: the table on stdout, bench/results/projection_latest.json and the
# "Count projection pipeline" section of docs/benchmarks.md. Exits non-zero when a count is not exact.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY, bench_drive
# The driver's loops replace the Celery nudges: do not queue tasks into the bench broker that nobody runs.
export LIKES_NUDGE_ENABLED="false"

bench_drive --setsid --stop-wait 150 --name "projection benchmark" bench.projection_bench "$@"
