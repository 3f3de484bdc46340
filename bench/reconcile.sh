#!/usr/bin/env bash
# Benchmark of reconciliation and repair (issue 11 "Benchmark").
#
#   ./bench/reconcile.sh [--relations 1000000] [--exact-videos 10000] [--exact-runs 20] ...   (see --help)
#   ./bench/reconcile.sh --relations 100000 --hot-likes 10000 --exact-videos 1000 --exact-runs 5 --no-docs  # quick
#
# Seeds a million relations straight into every layer (relation shards, SENT outbox, projection rows and
# vbuckets, display snapshots) in bulk SQL, checks the seed (routing sample, identity on a sample), then:
# coverage throughput (ours, a naive per-video COUNT(*) comparison and a raw SQL ceiling) idle and under a
# command load, with commands/s with and without a check running; exact mode on 10,000 videos while commands
# flow (barrier hold and time to result, commands that waited or got 503); and a repair of a hot video with
# 100,000 likes damaged by hand in SQL (approval -> live repaired count). The pipeline runs as plain loops in
# processes of their own (no Celery). Same setup and bench databases / Redis namespace as bench/run.sh
# (bench/env.sh); only 127.0.0.1 is contacted. Results: the tables on stdout, bench/results/reconcile_latest.json
# and the "Reconciliation" section of docs/benchmarks.md. Exits non-zero when a count or a relation is wrong.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY, bench_drive
# The driver's loops replace the Celery nudges: do not queue tasks into the bench broker that nobody runs.
export LIKES_NUDGE_ENABLED="false"

bench_drive --setsid --stop-wait 150 --name "reconcile benchmark" bench.reconcile_bench "$@"
