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
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY
# No Celery runs here: a reader's repair hint must not queue a task (and would refill the cold cache).
export LIKES_NUDGE_ENABLED="false"
# Every connection of this run (driver, clients, gunicorn) is tagged, so the driver can tell another
# benchmark on the same databases (bench/run.sh, bench/projection.sh) from its own connections.
export PGAPPNAME="likes-read-bench"

RUNDIR="$(mktemp -d "${TMPDIR:-/tmp}/likes-read-bench.XXXXXX")"
export BENCH_PIDDIR="$RUNDIR"  # the driver records each gunicorn master it starts here
bench_pid=""
cleanup() {
  trap - INT TERM EXIT
  # The driver stops its gunicorns and client processes on SIGTERM (and cleans its data) ...
  if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then
    kill -TERM "$bench_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$bench_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  # ... and as a backstop, anything left in the driver's own process group (it runs in a session of its
  # own, started below, so the group holds only the driver and its client processes) ...
  if [ -n "$bench_pid" ] && kill -0 -- "-$bench_pid" 2>/dev/null; then
    kill -TERM -- "-$bench_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 -- "-$bench_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$bench_pid" 2>/dev/null || true
  fi
  # ... and any gunicorn master the driver recorded (gunicorn runs in a session of its own).
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

setsid "$PY" -m bench.read_bench "$@" &
bench_pid=$!
set +e
wait "$bench_pid"
rc=$?
set -e
echo "[bench] read benchmark finished in $(( $(date +%s) - started ))s (rc=$rc)" >&2
cleanup
exit "$rc"
