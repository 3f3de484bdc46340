#!/usr/bin/env bash
# The command path's levers, one at a time, each before and after in the same run (issue 15 §1):
#
#   ./bench/levers.sh [--rounds 4] [--duration 3] ...   (see --help)
#
# The same setup, databases and Redis namespace as ./bench/run.sh (bench/env.sh). Results: the table on
# stdout, bench/results/levers_latest.json and the generated lever section of docs/benchmarks.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY, bench_drive

bench_drive --piddir likes-bench bench.levers "$@"
