#!/usr/bin/env bash
# The one entry point of the benchmarks; docs/benchmarks.md ("How to run") says what it sets up and what each runs.
#
#   bench/run.sh NAME [ARGS]        NAME: command levers projection projector convergence read reverse downstream reconcile
#                                         snapshot migration slotmove growth profile topology traffic capacity
#   bench/run.sh [ARGS]             the command path (NAME command), as bench/run.sh always ran it
#   bench/run.sh NAME --help        the options of NAME
set -euo pipefail
BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

name=command
case "${1:-}" in "" | -*) ;; *) name=$1; shift ;; esac
nudges=off stop_ticks=300 own_db=""
case "$name" in
  command) module=bench.command.bench nudges=on ;;  # the command path as deployed: nudges on
  levers) module=bench.command.levers nudges=on ;;
  projection) module=bench.projection.pipeline ;;
  projector) module=bench.projection.projector ;;
  convergence) module=bench.projection.convergence ;;
  read) module=bench.read.bench ;;
  reverse) module=bench.reverse ;;
  downstream) module=bench.downstream ;;
  reconcile) module=bench.reconcile.bench ;;
  snapshot) module=bench.snapshot.bench ;;
  migration) module=bench.migration.bench own_db=likes_bench_mig ;;
  slotmove) module=bench.slotmove own_db=likes_bench_slot ;;
  growth) module=bench.growth.bench stop_ticks=600 ;;
  profile) module=bench.profile ;;
  capacity) module=bench.capacity ;;  # docs/capacity.md from this run's per-unit costs
  traffic) module=bench.traffic own_db=likes_bench_traffic ;;  # risk verdicts and frozen accounts stay with the db
  topology)
    # Command throughput and commit -> displayCount on both topologies (issue 16): each half is `command` (no
    # HTTP) and `convergence` (the Celery path), then the table of both. Each sub-run takes the lock itself.
    out="$BENCH/results/topology"
    mkdir -p "$out"
    case " $* " in *" -h "* | *" --help "*) set -- --help; topologies="" ;; *) topologies="single scaled" ;; esac
    for topology in $topologies; do
      LIKES_TOPOLOGY=$topology "$BENCH/run.sh" command --skip-http --rounds 2 --no-docs --out "$out/command_$topology.json"
      LIKES_TOPOLOGY=$topology "$BENCH/run.sh" convergence --paths celery --duration 15 --no-docs \
        --out "$out/convergence_$topology.json"
    done
    cd "$BENCH/.." && exec .venv/bin/python -m bench.topology "$out" "$@" ;;
  *) echo "bench/run.sh: unknown benchmark '$name'; see the head of bench/run.sh" >&2; exit 2 ;;
esac

# Settings a benchmark needs before anything reads them (its own shard or partition layout).
case "$name" in
  convergence)  # the Procfile's `celery`; the stream sized to its one worker (4 processes, 2 pass groups; capacity.md)
    export PATH="$BENCH/../.venv/bin:$PATH" STREAM_PARTITIONS="${STREAM_PARTITIONS:-2}" ;;
  traffic)  # the Procfile's `celery`; three count partitions, the manifest over two: cnt_02 just added, empty, so
    # a hot spot's suggested move has somewhere to go; 0.45 of the writes is 1.35 times the mean of three partitions
    export PATH="$BENCH/../.venv/bin:$PATH" COUNT_PARTITIONS=3 COUNT_BOOTSTRAP_PARTITIONS="cnt_00,cnt_01" \
      HOTSPOT_MOVE_SUGGEST_SHARE="${HOTSPOT_MOVE_SUGGEST_SHARE:-0.45}" ;;
  snapshot)  # the bench's own snapshot storage (never the development one under .data/)
    export SNAPSHOT_STORAGE_BACKEND=filesystem SNAPSHOT_STORAGE_DIR="${TMPDIR:-/tmp}/likes-bench-snapshots" ;;
  migration)  # three count partitions, the first manifest sealed over two: cnt_02 starts with no routes
    export COUNT_PARTITIONS=3 COUNT_BOOTSTRAP_PARTITIONS="cnt_00,cnt_01" ;;
  slotmove)  # three relation shards, contract v1 over two: rel_02 starts empty, the way a shard is added
    [ "${LIKES_TOPOLOGY:-single}" = single ] || { echo "[slotmove] runs on LIKES_TOPOLOGY=single only" >&2; exit 2; }
    export RELATION_SHARDS=3 RELATION_CONTRACT_SHARDS="rel_00,rel_01" RELATION_MOVE_RETENTION_S=0 ;;
esac

source "$BENCH/../scripts/lib.sh"
BENCH_LOCK="${TMPDIR:-/tmp}/likes-bench.lock"
exec 9>"$BENCH_LOCK"  # inherited by the driver; released when it and everything it started have exited
if ! flock -n 9; then
  echo "[bench] another benchmark holds $BENCH_LOCK; waiting up to ${BENCH_LOCK_WAIT_S:-900}s ..." >&2
  flock -w "${BENCH_LOCK_WAIT_S:-900}" 9 || die "another benchmark still holds $BENCH_LOCK"
fi
setup_all  # cd "$ROOT", .venv, PostgreSQL, Redis
PY="$VENV/bin/python"

# The bench URLs: the same servers, the bench database name and Redis db. Refuse anything that is not loopback.
read -r DATABASE_URL REDIS_URL < <("$PY" - "$DATABASE_URL" "$REDIS_URL" <<'PYEOF'
import sys
from urllib.parse import urlsplit, urlunsplit

pg, rd = urlsplit(sys.argv[1]), urlsplit(sys.argv[2])
for var, parts in (("DATABASE_URL", pg), ("REDIS_URL", rd)):
    if parts.hostname not in ("127.0.0.1", "localhost"):
        sys.exit(f"[bench] ERROR: {var} points at {parts.hostname!r}; the benchmarks only run against 127.0.0.1")
print(urlunsplit((pg.scheme, pg.netloc, "/likes_bench", pg.query, "")),
      urlunsplit((rd.scheme, rd.netloc, "/14", rd.query, "")))
PYEOF
)
[ -n "${DATABASE_URL:-}" ] || die "could not derive the bench database URL"
# drop_dbs NAME: the databases NAME and NAME_(rel|cnt)_NN, those exact names only (dropdb refuses a database someone
# is connected to: the run stops); the driver bootstraps them again.
drop_dbs() {
  for db in $(psql "${DATABASE_URL%/*}/postgres" -Atc "SELECT datname FROM pg_database WHERE datname ~ '^$1(_(rel|cnt)_[0-9]{2})?\$'"); do
    dropdb --maintenance-db="${DATABASE_URL%/*}/postgres" "$db"
  done
}
if [ -n "$own_db" ]; then  # a fresh bootstrap every run
  DATABASE_URL="${DATABASE_URL%/*}/$own_db"
  drop_dbs "$own_db"
else
  # The shared bench databases keep the stream contract of their first bootstrap (P is never edited in place):
  # a run with another STREAM_PARTITIONS (unset: settings.base's 8) starts them afresh.
  export STREAM_PARTITIONS="${STREAM_PARTITIONS:-8}"
  have=$(psql "$DATABASE_URL" -Atc "SELECT partitions FROM eventlog_streamcontract WHERE is_active" 2>/dev/null || true)
  if [ -n "$have" ] && [ "$have" != "$STREAM_PARTITIONS" ]; then
    echo "[bench] the bench databases' stream has $have partitions, not $STREAM_PARTITIONS: recreating them" >&2
    drop_dbs likes_bench
  fi
fi
export DATABASE_URL REDIS_URL
# Shard and stream URLs derive from the two above; never inherit ones that point at other databases.
unset RELATION_SHARD_URLS COUNT_PARTITION_URLS REDIS_STREAMS_URL CELERY_BROKER_URL
export LIKES_REDIS_PREFIX="likes-bench" RATE_LIMIT_ENABLED=false DJANGO_SETTINGS_MODULE="likes_project.settings.dev"
[ "$nudges" = on ] || export LIKES_NUDGE_ENABLED=false  # the drivers run the pipeline's loops themselves
export VIDEO_SERVICE_TOKEN="${BENCH_VIDEO_SERVICE_TOKEN:-bench-video-service-token}" DJANGO_DEBUG=false
# DEBUG is false, so the public development secrets are refused: the run uses throwaway ones of its own.
export DJANGO_SECRET_KEY="${DJANGO_SECRET_KEY:-bench-$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
export CURSOR_SIGNING_KEY="${CURSOR_SIGNING_KEY:-bench-$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
export LOG_LEVEL="${LOG_LEVEL:-WARNING}" PYTHONUNBUFFERED=1
export PGAPPNAME="likes-bench-$name"  # every connection of the run: another benchmark's are told apart
apply_topology  # LIKES_TOPOLOGY=scaled: two PostgreSQL servers, caches and streams on the Redis Cluster
echo "[bench] $name: databases ${DATABASE_URL##*/} (+ _rel_NN, _cnt_NN) on ${DATABASE_URL#*@}; redis ${REDIS_URL#*@}" >&2

# stop TARGET TICKS [kill]: SIGTERM to TARGET (a pid, or -pid for a process group) if alive, wait up to TICKS
# tenths of a second, then with "kill" SIGKILL whatever is left.
stop() {
  kill -0 -- "$1" 2>/dev/null || return 0
  kill -TERM -- "$1" 2>/dev/null || true
  for _ in $(seq 1 "$2"); do kill -0 -- "$1" 2>/dev/null || break; sleep 0.1; done
  if [ "${3:-}" = kill ]; then kill -KILL -- "$1" 2>/dev/null || true; fi
}
# The driver first (its finally-blocks stop its processes on SIGTERM), then as a backstop its session (only it
# and what it spawned), then any gunicorn it recorded in $BENCH_PIDDIR (gunicorn runs in a session of its own).
cleanup() {
  trap - INT TERM EXIT
  if [ -n "$driver" ]; then stop "$driver" "$stop_ticks"; stop "-$driver" 50 kill; fi
  for f in "$BENCH_PIDDIR"/gunicorn.*.pid; do
    if [ -s "$f" ]; then stop "$(cat "$f")" 50 kill; fi
  done
  rm -rf "$BENCH_PIDDIR"
}
driver="" started=$(date +%s) rc=0
export BENCH_PIDDIR="$(mktemp -d "${TMPDIR:-/tmp}/likes-bench-$name.XXXXXX")"
trap cleanup INT TERM EXIT
"$PY" manage.py migrate_all >/dev/null
setsid "$PY" -m "$module" "$@" &
driver=$!
wait "$driver" || rc=$?
echo "[bench] $name finished in $(( $(date +%s) - started ))s (rc=$rc)" >&2
cleanup
exit "$rc"
