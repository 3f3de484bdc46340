#!/usr/bin/env bash
# Benchmark of the reverse "who liked" index (issue #5 "Benchmark").
#
#   ./bench/reverse.sh [--likers 200000] [--deep-page 1000] [--reps 100] [--events 20000] [--rounds 3] ...
#                      (see --help)
#
# 1. the likers page (counting.selectors_likers.likers_page_list, limit 20) of one video with 200,000 likers
#    spread over the R reverse shards, p50/p99 at page 1 and page 1,000; 2. the reverse projector's throughput
#    (consume_partition(ReverseIndexProjector()) in 2 processes) draining a backlog for uniform videos and for
#    one hot video. Same setup and the same bench databases / Redis namespace as bench/run.sh (bench/env.sh,
#    which also takes the one-benchmark-at-a-time lock); only 127.0.0.1 is contacted. Results: the table on
#    stdout, bench/results/reverse_latest.json and the "Reverse index (issue 5)" section of docs/benchmarks.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # lock, setup_all, the bench databases and Redis namespace, PY, bench_drive
# No Celery runs here: nothing may consume the bench streams but this run's two consumer processes.
export LIKES_NUDGE_ENABLED="false"
# Every connection of this run (driver and consumers) is tagged, so the driver can tell another benchmark
# on the same databases from its own connections.
export PGAPPNAME="likes-reverse-bench"

# bench_drive installs the cleanup trap (INT/TERM/EXIT: the driver, then its process group) and runs migrate_all.
bench_drive --setsid --piddir likes-reverse-bench --stop-wait 300 --name "reverse benchmark" bench.reverse_bench "$@"
