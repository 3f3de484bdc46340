#!/usr/bin/env bash
# Benchmark of recovery snapshots and the restore from them (issue 12 "Benchmark").
#
#   ./bench/snapshot.sh [--relations 1000000] [--snapshots 20] [--facts-batches 3] ...   (see --help)
#   ./bench/snapshot.sh --relations 100000 --snapshots 5 --facts-batches 2   # quick: about 5 minutes
#
# Seeds a million relations (so a million projection rows) straight into every layer in bulk SQL (bench/reconcile's
# seed), checks the seed, then: the snapshot build as `manage.py snapshot_create` runs it (the ops job) against a
# naive stop-the-world ORM JSON dump and a raw SQL ceiling (minimal cut + COPY to /dev/null), idle (build time,
# artifact size per kind); the dispatch pause p50 / p99 of 20 builds while a command load runs and the pipeline flows
# (plain loops in processes of their own, no Celery); then one count partition's rows deleted by hand and recovered
# two ways in the same run: repairs from the facts (a few scopes of videos, extrapolated to every video, the output
# says so) and the restore of the last sealed snapshot through the same request / approval flow (load, replay from
# the offset vector, checks, fenced switch, exact verify), its load against a raw COPY FROM and an ORM bulk_create.
# Same setup and bench databases / Redis namespace as bench/run.sh (bench/env.sh); the artifacts go to a directory of
# the bench's own, emptied at the start and the end; only 127.0.0.1 is contacted. Results: the tables on stdout and
# bench/results/snapshot_latest.json (its "markdown" key: the generated part of a docs/benchmarks.md section; the
# docs file is not written). Exits non-zero when a count or an acknowledged relation is wrong after the restore, or a
# repair or the restore failed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY, bench_drive
# The driver's loops replace the Celery nudges: do not queue tasks into the bench broker that nobody runs.
export LIKES_NUDGE_ENABLED="false"
# The bench's own snapshot storage (never the development one under .data/); the bench lock makes it exclusive.
export SNAPSHOT_STORAGE_BACKEND="filesystem"
export SNAPSHOT_STORAGE_DIR="${TMPDIR:-/tmp}/likes-bench-snapshots"

bench_drive --setsid --stop-wait 150 --name "snapshot benchmark" bench.snapshot_bench "$@"
