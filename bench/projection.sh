#!/usr/bin/env bash
# Benchmark of the asynchronous count pipeline (issue #3 "Benchmark"; spec TEST-3).
#
#   ./bench/projection.sh [--duration 15] [--warmup 3] [--procs 4] [--projectors 2] ...   (see --help)
#
# Sustained like/unlike load through relation_set_state while, in the same run, the outbox publishers,
# the count projectors (the shared consumer framework) and the display snapshot job loop in their own
# processes (plain loops, no Celery), then a drain, an exactness check against the relation facts, and
# a backlog replay that measures the projector's own capacity next to a naive single-row counter.
# Same setup and the same bench databases / Redis namespace as bench/run.sh (bench/env.sh); only
# 127.0.0.1 is contacted. Results: the table on stdout, bench/results/projection_latest.json and the
# "Count projection pipeline" section of docs/benchmarks.md. Exits non-zero when a count is not exact.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # setup_all, the bench databases and Redis namespace, PY
# The loops below replace the Celery nudges: do not queue tasks into the bench broker that nobody runs.
export LIKES_NUDGE_ENABLED="false"

bench_pid=""
cleanup() {
  trap - INT TERM EXIT
  if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then
    # The driver terminates and joins its worker processes on SIGTERM ...
    kill -TERM "$bench_pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$bench_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  # ... and as a backstop, anything left in the driver's own process group (it runs in a session of
  # its own, started below, so the group holds only the driver and the workers it spawned).
  if [ -n "$bench_pid" ] && kill -0 -- "-$bench_pid" 2>/dev/null; then
    kill -TERM -- "-$bench_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 -- "-$bench_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$bench_pid" 2>/dev/null || true
  fi
}
trap cleanup INT TERM EXIT

started=$(date +%s)
"$PY" manage.py migrate_all >/dev/null
echo "[bench] migrate_all done" >&2

setsid "$PY" -m bench.projection_bench "$@" &
bench_pid=$!
set +e
wait "$bench_pid"
rc=$?
set -e
echo "[bench] projection benchmark finished in $(( $(date +%s) - started ))s (rc=$rc)" >&2
cleanup
exit "$rc"
