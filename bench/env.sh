# Shared environment of the benchmarks (sourced by bench/run.sh, bench/projection.sh and bench/read.sh, never run).
#
# Does the setup through scripts/lib.sh (.venv, PostgreSQL, Redis), then points every setting at the
# bench's OWN databases (likes_bench, likes_bench_rel_NN, likes_bench_cnt_NN on the server found) and
# its own Redis namespace (db 14, prefix likes-bench), so dev and test data are never touched.
# Refuses anything that is not loopback. Sets PY to the virtualenv's python. Defines bench_drive, which runs
# a driver module and cleans up after it.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

# One benchmark at a time: every bench script shares these databases and this Redis namespace, and each
# empties them before it measures. The lock (fd 9, inherited by the driver) is released when the script
# and everything it started have exited.
BENCH_LOCK="${TMPDIR:-/tmp}/likes-bench.lock"
exec 9>"$BENCH_LOCK"
if ! flock -n 9; then
  echo "[bench] another benchmark holds $BENCH_LOCK; waiting up to ${BENCH_LOCK_WAIT_S:-900}s ..." >&2
  flock -w "${BENCH_LOCK_WAIT_S:-900}" 9 || die "another benchmark still holds $BENCH_LOCK"
fi

setup_all  # cd "$ROOT", .venv, PostgreSQL, Redis

PY="$VENV/bin/python"

# The bench URLs: same servers, bench database name / Redis db. Refuse anything that is not loopback.
read -r BENCH_DATABASE_URL BENCH_REDIS_URL < <("$PY" - "$DATABASE_URL" "$REDIS_URL" <<'PYEOF'
import sys
from urllib.parse import urlsplit, urlunsplit

pg, rd = urlsplit(sys.argv[1]), urlsplit(sys.argv[2])
for name, parts in (("DATABASE_URL", pg), ("REDIS_URL", rd)):
    if parts.hostname not in ("127.0.0.1", "localhost"):
        sys.exit(f"[bench] ERROR: {name} points at {parts.hostname!r}; the benchmark only runs against 127.0.0.1")
print(urlunsplit((pg.scheme, pg.netloc, "/likes_bench", pg.query, "")),
      urlunsplit((rd.scheme, rd.netloc, "/14", rd.query, "")))
PYEOF
)
[ -n "${BENCH_DATABASE_URL:-}" ] || die "could not derive the bench database URL"

export DATABASE_URL="$BENCH_DATABASE_URL"
export REDIS_URL="$BENCH_REDIS_URL"
# Shard / stream URLs derive from the two above; never inherit ones that point at other databases.
unset RELATION_SHARD_URLS COUNT_PARTITION_URLS REDIS_STREAMS_URL CELERY_BROKER_URL
export LIKES_REDIS_PREFIX="likes-bench"
# The benchmarks measure the command path and the pipeline, not the abuse limiter (CMD-18 buckets are off).
export RATE_LIMIT_ENABLED="false"
export DJANGO_SETTINGS_MODULE="likes_project.settings.dev"
export VIDEO_SERVICE_TOKEN="${BENCH_VIDEO_SERVICE_TOKEN:-bench-video-service-token}"
export DJANGO_DEBUG="false"
# DEBUG is false, so the public development secrets are refused: the run uses throwaway ones of its own.
export DJANGO_SECRET_KEY="${DJANGO_SECRET_KEY:-bench-$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
export CURSOR_SIGNING_KEY="${CURSOR_SIGNING_KEY:-bench-$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
export LOG_LEVEL="${LOG_LEVEL:-WARNING}"
export PYTHONUNBUFFERED=1
# LIKES_TOPOLOGY=scaled (issue 16): the bench databases alternate over two PostgreSQL servers, caches and
# streams go to the Redis Cluster (prefix likes-bench), the broker stays on the plain Redis (db 14).
apply_topology

echo "[bench] databases: likes_bench (+ _rel_NN, _cnt_NN) on ${DATABASE_URL#*@}; redis ${REDIS_URL#*@} prefix $LIKES_REDIS_PREFIX" >&2

# --- running a driver -------------------------------------------------------------------------------------

# bench_stop TARGET TICKS [kill]: SIGTERM to TARGET (a pid, or "-pid" for a process group) if it is alive,
# wait up to TICKS tenths of a second for it to go, then with "kill" SIGKILL whatever is left.
bench_stop() {
  local target="$1" ticks="$2"
  kill -0 -- "$target" 2>/dev/null || return 0
  kill -TERM -- "$target" 2>/dev/null || true
  for _ in $(seq 1 "$ticks"); do kill -0 -- "$target" 2>/dev/null || break; sleep 0.1; done
  if [ "${3:-}" = kill ]; then kill -KILL -- "$target" 2>/dev/null || true; fi
  return 0
}

# The cleanup of bench_drive (trap and end of run): the driver first (its own finally-blocks stop its
# gunicorns and worker processes on SIGTERM); with --setsid, as a backstop, anything left in the driver's
# process group (a session of its own, so the group holds only the driver and the processes it spawned);
# then any gunicorn master the driver recorded in $BENCH_PIDDIR (gunicorn runs in a session of its own).
bench_cleanup() {
  trap - INT TERM EXIT
  if [ -n "$bench_pid" ]; then
    if [ "$bench_setsid" = 1 ]; then
      bench_stop "$bench_pid" "$bench_stop_ticks"
      bench_stop "-$bench_pid" 50 kill
    else
      bench_stop "$bench_pid" "$bench_stop_ticks" kill
    fi
  fi
  if [ -n "$bench_rundir" ]; then
    for f in "$bench_rundir"/gunicorn.*.pid; do
      [ -s "$f" ] || continue
      bench_stop "$(cat "$f")" 50 kill
    done
    rm -rf "$bench_rundir"
  fi
}

# bench_drive [--setsid] [--piddir PREFIX] [--stop-wait TICKS] [--name NAME] MODULE [ARGS...]
# migrate_all, then `$PY -m MODULE ARGS...` in the background (with --setsid in a session of its own), stopped
# and cleaned up by bench_cleanup on INT/TERM/EXIT; exits with the driver's code. --piddir: a temporary
# directory ${TMPDIR:-/tmp}/PREFIX.XXXXXX exported as BENCH_PIDDIR (the driver records each gunicorn master it
# starts there). --stop-wait: tenths of a second the driver gets after SIGTERM (default 100).
bench_drive() {
  bench_setsid=0 bench_rundir="" bench_stop_ticks=100 bench_pid=""
  local name=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --setsid) bench_setsid=1; shift ;;
      --piddir) bench_rundir="$(mktemp -d "${TMPDIR:-/tmp}/$2.XXXXXX")"; export BENCH_PIDDIR="$bench_rundir"; shift 2 ;;
      --stop-wait) bench_stop_ticks="$2"; shift 2 ;;
      --name) name="$2 "; shift 2 ;;
      *) break ;;
    esac
  done
  local module="$1"
  shift
  trap bench_cleanup INT TERM EXIT

  local started rc
  started=$(date +%s)
  "$PY" manage.py migrate_all >/dev/null
  echo "[bench] migrate_all done" >&2

  if [ "$bench_setsid" = 1 ]; then
    setsid "$PY" -m "$module" "$@" &
  else
    "$PY" -m "$module" "$@" &
  fi
  bench_pid=$!
  set +e
  wait "$bench_pid"
  rc=$?
  set -e
  # Without a session of its own the driver is gone and its pid may be reused: stop nothing by it.
  [ "$bench_setsid" = 1 ] || bench_pid=""
  echo "[bench] ${name}finished in $(( $(date +%s) - started ))s (rc=$rc)" >&2
  bench_cleanup
  exit "$rc"
}
