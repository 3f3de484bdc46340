#!/usr/bin/env bash
# Benchmark of relation slot moves (issue 16 "Benchmark"): 64 slots holding 1,000,000 relations moved rel_00 ->
# rel_02 (a shard added empty) under a command load, and back; the duration and the write pause p50 / p99, against
# a naive stop-the-world copy and the raw COPY ceiling of the same rows, in one run (bench/slotmove_bench.py).
#
#   ./bench/slotmove.sh                   # 1,000,000 relations (+ as many in the source's other slots)
#   ./bench/slotmove.sh --scale 50000     # quick: a few minutes
#
# Three relation shards, contract v1 spread over two of them (RELATION_SHARDS=3,
# RELATION_CONTRACT_SHARDS=rel_00,rel_01). The `single` topology only (every database on one server): the run's
# databases are its own, likes_bench_slot (+ _rel_NN, _cnt_NN), dropped and created again (migrate_all) at the
# start of every run. Same setup, lock and Redis namespace as the other benchmarks (bench/env.sh); only 127.0.0.1 is
# contacted. Results: the tables on stdout and bench/results/slotmove_latest.json.
set -euo pipefail
[ "${LIKES_TOPOLOGY:-single}" = single ] || { echo "[slotmove] runs on LIKES_TOPOLOGY=single only" >&2; exit 2; }
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY, bench_drive
export LIKES_NUDGE_ENABLED="false"
export RELATION_SHARDS=3
export RELATION_CONTRACT_SHARDS="rel_00,rel_01"
export RELATION_MOVE_RETENTION_S=0  # the source's copy is deleted in the job, right after VERIFY

SLOT_DB="likes_bench_slot"
DATABASE_URL="$("$PY" -m bench.own_databases url "$DATABASE_URL" "$SLOT_DB" slotmove)"
export DATABASE_URL
"$PY" -m bench.own_databases drop "$DATABASE_URL" "$SLOT_DB" slotmove
echo "[slotmove] databases: $SLOT_DB (+ _rel_00.._rel_02, _cnt_NN); contract v1 over $RELATION_CONTRACT_SHARDS" >&2

bench_drive --setsid --stop-wait 150 --name "slot-move benchmark" bench.slotmove_bench "$@"
