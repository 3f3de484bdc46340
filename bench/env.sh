# Shared environment of the benchmarks (sourced by bench/run.sh and bench/projection.sh, never run).
#
# Does the setup through scripts/lib.sh (.venv, PostgreSQL, Redis), then points every setting at the
# bench's OWN databases (likes_bench, likes_bench_rel_NN, likes_bench_cnt_NN on the server found) and
# its own Redis namespace (db 14, prefix likes-bench), so dev and test data are never touched.
# Refuses anything that is not loopback. Sets PY to the virtualenv's python.
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
export LOG_LEVEL="${LOG_LEVEL:-WARNING}"
export PYTHONUNBUFFERED=1

echo "[bench] databases: likes_bench (+ _rel_NN, _cnt_NN) on ${DATABASE_URL#*@}; redis ${REDIS_URL#*@} prefix $LIKES_REDIS_PREFIX" >&2
