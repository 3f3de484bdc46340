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
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY

RUNDIR="$(mktemp -d "${TMPDIR:-/tmp}/likes-bench.XXXXXX")"
export BENCH_PIDDIR="$RUNDIR"  # the driver records each gunicorn master it starts here
bench_pid=""
cleanup() {
  trap - INT TERM EXIT
  # Stop the driver first (its own finally-blocks stop gunicorn and the worker pool) ...
  if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then
    kill -TERM "$bench_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$bench_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$bench_pid" 2>/dev/null || true
  fi
  # ... and as a backstop, any gunicorn master the driver recorded but could not stop.
  for f in "$RUNDIR"/gunicorn.*.pid; do
    [ -s "$f" ] || continue
    gpid="$(cat "$f")"
    if kill -0 "$gpid" 2>/dev/null; then
      kill -TERM "$gpid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$gpid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$gpid" 2>/dev/null || true
    fi
  done
  rm -rf "$RUNDIR"
}
trap cleanup INT TERM EXIT

started=$(date +%s)
"$PY" manage.py migrate_all >/dev/null
echo "[bench] migrate_all done" >&2

"$PY" -m bench.command_bench "$@" &
bench_pid=$!
set +e
wait "$bench_pid"
rc=$?
set -e
bench_pid=""
echo "[bench] finished in $(( $(date +%s) - started ))s (rc=$rc)" >&2
exit "$rc"
