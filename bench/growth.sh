#!/usr/bin/env bash
# Benchmark of costs that do not grow with history (issue 15 §5, P7).
#
#   ./bench/growth.sh [--sizes 1000000,10000000] [--reps 200] [--warmup 20] [--keep] [--no-docs] ...   (see --help)
#
# Loads 1,000,000 relations of history with COPY into every store (relation facts, commands and outbox rows,
# count projection and vbuckets, reverse index, display snapshots, users and videos), measures the like command,
# the batch query, the my-likes and likers pages (page 1 and a deep page) and an exact reconciliation of the hot
# video, then grows the SAME history to 10,000,000 relations and measures again: each figure at both sizes, the
# ratio, disk used and load time. Same setup and the same bench databases / Redis namespace as bench/run.sh
# (bench/env.sh, which also takes the one-benchmark-at-a-time lock); only 127.0.0.1 is contacted. The loaded data
# is dropped at the end unless --keep. Results: the table on stdout, bench/results/growth_latest.json and the
# "Growth" section of docs/benchmarks.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # lock, setup_all, bench databases / Redis namespace, PY, bench_drive
# No Celery runs here: the driver publishes and projects the commands' events itself before the next size.
export LIKES_NUDGE_ENABLED="false"
# Every connection of this run (the driver's and its COPY connections) is tagged, so the driver can tell
# another benchmark on the same databases from its own connections.
export PGAPPNAME="likes-growth-bench"

# bench_drive installs the cleanup trap (INT/TERM/EXIT: the driver, then its process group) and runs migrate_all.
bench_drive --setsid --piddir likes-growth-bench --stop-wait 600 --name "growth benchmark" bench.growth_bench "$@"
