#!/usr/bin/env bash
# Benchmark of the like command path (issue #2 "Benchmark", spec TEST-2/TEST-3/TEST-4).
#
#   ./bench/run.sh [--duration 12] [--warmup 2] [--procs 8] [--http-clients 8] ...   (see --help)
#
# Does its own setup through scripts/lib.sh, then uses its OWN databases (likes_bench, likes_bench_rel_NN,
# likes_bench_cnt_NN on the server setup found) and its own Redis namespace (db 14, prefix likes-bench),
# so dev and test data are never touched. Only 127.0.0.1 is contacted. Results: the table on stdout,
# bench/results/latest.json and the generated section of docs/benchmarks.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
setup_all  # cd "$ROOT", .venv, PostgreSQL, Redis

PY="$VENV/bin/python"

# The bench URLs: same servers, bench database name / Redis db. Refuse anything that is not loopback.
read -r BENCH_DATABASE_URL BENCH_REDIS_URL < <("$PY" - "$DATABASE_URL" "$REDIS_URL" <<'EOF'
import sys
from urllib.parse import urlsplit, urlunsplit

pg, rd = urlsplit(sys.argv[1]), urlsplit(sys.argv[2])
for name, parts in (("DATABASE_URL", pg), ("REDIS_URL", rd)):
    if parts.hostname not in ("127.0.0.1", "localhost"):
        sys.exit(f"[bench] ERROR: {name} points at {parts.hostname!r}; the benchmark only runs against 127.0.0.1")
print(urlunsplit((pg.scheme, pg.netloc, "/likes_bench", pg.query, "")),
      urlunsplit((rd.scheme, rd.netloc, "/14", rd.query, "")))
EOF
)
[ -n "${BENCH_DATABASE_URL:-}" ] || die "could not derive the bench database URL"

export DATABASE_URL="$BENCH_DATABASE_URL"
export REDIS_URL="$BENCH_REDIS_URL"
# Shard / stream URLs derive from the two above; never inherit ones that point at other databases.
unset RELATION_SHARD_URLS COUNT_PARTITION_URLS REDIS_STREAMS_URL CELERY_BROKER_URL
export LIKES_REDIS_PREFIX="likes-bench"
# The benchmark measures the command path, not the abuse limiter (CMD-18 buckets are off).
export RATE_LIMIT_ENABLED="false"
export DJANGO_SETTINGS_MODULE="likes_project.settings.dev"
export VIDEO_SERVICE_TOKEN="${BENCH_VIDEO_SERVICE_TOKEN:-bench-video-service-token}"
export DJANGO_DEBUG="false"
export LOG_LEVEL="${LOG_LEVEL:-WARNING}"
export PYTHONUNBUFFERED=1

echo "[bench] databases: likes_bench (+ _rel_NN, _cnt_NN) on ${DATABASE_URL#*@}; redis ${REDIS_URL#*@} prefix $LIKES_REDIS_PREFIX" >&2

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
