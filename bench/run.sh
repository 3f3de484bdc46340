#!/usr/bin/env bash
# Benchmark of the like command path (issue #2 "Benchmark", spec TEST-2/TEST-3/TEST-4).
#
#   ./bench/run.sh [--duration 12] [--warmup 2] [--procs 8] [--http-clients 8] ...   (see --help)
#
# Does its own setup through scripts/lib.sh (bench/env.sh), then uses its OWN databases (likes_bench,
# likes_bench_rel_NN, likes_bench_cnt_NN on the server setup found) and its own Redis namespace (db 14,
# prefix likes-bench), so dev and test data are never touched. Only 127.0.0.1 is contacted. Results: the
# table on stdout, bench/results/latest.json and the generated section of docs/benchmarks.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY, bench_drive

bench_drive --piddir likes-bench bench.command_bench "$@"
