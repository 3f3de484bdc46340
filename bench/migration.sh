#!/usr/bin/env bash
# Benchmark of the online virtual-bucket migration of count partitions (issue 13 "Benchmark").
#
#   ./bench/migration.sh                       # 256 buckets holding 1,000,000 projection rows (see --help)
#   ./bench/migration.sh --scale 50000         # quick: a few minutes
#
# Three count partitions, the first manifest sealed over two of them (COUNT_PARTITIONS=3,
# COUNT_BOOTSTRAP_PARTITIONS=cnt_00,cnt_01): cnt_02 starts with no routes. Seeds `--scale` projection rows (and
# their vbuckets) into the 256 buckets that move, fewer into the others, in bulk straight into the count
# partitions; then in one run: projection throughput (a backlog of events applied by the projectors) before the
# move; the migration of the 256 buckets cnt_00 -> cnt_02 by the product's protocol (plan by one operator, approval
# by another, the ops job run as a worker runs it) under a sustained command load whose events the projectors apply
# (the change log is live during the copy); the projection throughput after; a series of migrations (the write
# pause p50 / p99); a naive stop-the-world move and a raw COPY ceiling; an exact final check.
#
# Same setup, lock and Redis namespace as the other benchmarks (bench/env.sh), but a database set of its OWN,
# likes_bench_mig (+ _rel_NN, _cnt_NN) on the same server: the run moves routes, and the other benchmarks'
# likes_bench* databases must keep their two-partition bootstrap. Those likes_bench_mig* databases are dropped
# and created again (migrate_all bootstraps them) at the start of every run. Only 127.0.0.1 is contacted.
# Results: the tables on stdout and bench/migration/results-<scale>.json (gitignored); `python -m
# bench.migration.report FILE` prints a results file again.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY, bench_drive
# The driver's loops replace the Celery nudges: do not queue tasks into the bench broker that nobody runs.
export LIKES_NUDGE_ENABLED="false"
export COUNT_PARTITIONS=3
export COUNT_BOOTSTRAP_PARTITIONS="cnt_00,cnt_01"

MIG_DB="likes_bench_mig"
DATABASE_URL="$("$PY" -m bench.own_databases url "$DATABASE_URL" "$MIG_DB" migration)"
export DATABASE_URL

# A fresh bootstrap every run: drop this benchmark's own databases (and only those: the exact names
# likes_bench_mig, likes_bench_mig_rel_NN, likes_bench_mig_cnt_NN); migrate_all (bench_drive) creates them again.
"$PY" -m bench.own_databases drop "$DATABASE_URL" "$MIG_DB" migration
echo "[migration] databases: $MIG_DB (+ _rel_NN, _cnt_00.._cnt_02); COUNT_BOOTSTRAP_PARTITIONS=$COUNT_BOOTSTRAP_PARTITIONS" >&2

bench_drive --setsid --stop-wait 150 --name "migration benchmark" bench.migration_bench "$@"
