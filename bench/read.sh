#!/usr/bin/env bash
# Benchmark of the read path (issue #4 "Benchmark"; spec TEST-3).
#
#   ./bench/read.sh [--duration 4] [--rounds 2] [--procs 4] [--http-clients 4] [--rebuild-relations auto] ...
#                   (see --help)
#
# 1. the batch query of 20 ids (warm relation cache, cold relation cache, Redis down), at the service layer
#    and over HTTP (gunicorn); 2. the my-likes page 1 vs page 500 of a user with 50,000 likes, next to an
#    OFFSET baseline; 3. relation_cache_rebuild() over 1,000,000 relations (250,000 and extrapolated when a
#    calibration projects more than the budget). Same setup and the same bench databases / Redis namespace
#    as bench/run.sh (bench/env.sh); only 127.0.0.1 is contacted. Results: the table on stdout,
#    bench/results/read_latest.json and the "Read path" section of docs/benchmarks.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY, bench_drive
# No Celery runs here: a reader's repair hint must not queue a task (and would refill the cold cache).
export LIKES_NUDGE_ENABLED="false"
# Every connection of this run (driver, clients, gunicorn) is tagged, so the driver can tell another
# benchmark on the same databases (bench/run.sh, bench/projection.sh) from its own connections.
export PGAPPNAME="likes-read-bench"

bench_drive --setsid --piddir likes-read-bench --stop-wait 300 --name "read benchmark" bench.read_bench "$@"
