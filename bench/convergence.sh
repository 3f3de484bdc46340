#!/usr/bin/env bash
# Commit -> displayCount convergence at 80% of the highest sustained command load (issue 15 §2).
#
#   ./bench/convergence.sh [--paths loops,celery] [--duration 20] [--procs 4] ... (see --help)
#
# For each pipeline path (the bench's own loops, and the real Celery worker and beat started from the Procfile's
# `worker` and `beat` lines): the highest sustained command load (closed loop, --procs processes) with the
# pipeline running, then an open-loop load at --load-share (80%) of it with the commit -> displayCount probe;
# a drain and the exactness check after each. Same setup and bench databases / Redis namespace as bench/run.sh
# (bench/env.sh, which also takes the one-benchmark-at-a-time lock); only 127.0.0.1 is contacted. Results: the
# table on stdout, bench/results/convergence_latest.json and the "Convergence (issue 15 §2)" section of
# docs/benchmarks.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # lock, setup_all, the bench databases and Redis namespace, PY, bench_drive
# The bench's own loops replace the nudges; the Celery phases turn them on for their command clients and workers.
export LIKES_NUDGE_ENABLED="false"
export PATH="$VENV/bin:$PATH"  # the Procfile's `celery`

bench_drive --setsid --piddir likes-convergence-bench --stop-wait 300 --name "convergence benchmark" \
  bench.convergence_bench "$@"
