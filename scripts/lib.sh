#!/usr/bin/env bash
# Shared setup for scripts/run.sh, scripts/manage.sh and scripts/test.sh: virtualenv, requirements,
# PostgreSQL, Redis, and (run.sh and manage.sh) the service's environment.
# Uses DATABASE_URL / REDIS_URL when set, else servers at 127.0.0.1, else starts private ones under
# .data/ (installing the Debian packages first when missing and running as root).
# setup_service (run.sh, manage.sh) installs only what the service needs; setup_all (test.sh, bench/)
# adds the tests' and tools' packages and Debian's Chromium for the browser tests.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="$ROOT/.data"
VENV="$ROOT/.venv"
# The private servers' ports lie below Linux's ephemeral range (32768-60999): a client socket the kernel gave a
# local port in that range (the suite opens thousands) would make a server's bind fail now and then.
PRIVATE_PG_PORT="${PRIVATE_PG_PORT:-15432}"
PRIVATE_REDIS_PORT="${PRIVATE_REDIS_PORT:-16379}"
# LIKES_TOPOLOGY=single (default): every database on one PostgreSQL server, all of Redis on one node.
# LIKES_TOPOLOGY=scaled (issue 16): a second PostgreSQL server holds rel_01 and cnt_01, caches and event
# streams live on a three-node Redis Cluster, and the Celery broker stays on the plain Redis.
LIKES_TOPOLOGY="${LIKES_TOPOLOGY:-single}"
PRIVATE_PG2_PORT="${PRIVATE_PG2_PORT:-15433}"
PRIVATE_CLUSTER_PORTS="${PRIVATE_CLUSTER_PORTS:-17001 17002 17003}"  # + 10000: each node's bus port
mkdir -p "$DATA"

log() { echo "[setup] $*" >&2; }
die() { echo "[setup] ERROR: $*" >&2; exit 1; }

apt_install() {
  if [ "$(id -u)" != "0" ]; then
    die "missing $*; install it (sudo apt-get install -y $*) or set the matching URL variable"
  fi
  command -v apt-get >/dev/null || die "missing $* and no apt-get to install it"
  log "installing Debian packages: $*"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

pick_python() {
  for c in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$c" ] && command -v "$c" >/dev/null || continue
    if "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then echo "$c"; return; fi
  done
  die "Python 3.11 or newer is required"
}

# requirements.txt has two parts: the service's packages, then, from the line REQUIREMENTS_TOOLING_HEADER
# on, those only the tests, the benchmarks and the linter use (pytest, hypothesis, playwright, ruff, py-spy).
# `ensure_venv runtime` installs the first part (the whole file when the header is missing); `ensure_venv`
# the whole file. Each has its stamp; the whole file's stamp covers the first part too.
REQUIREMENTS_TOOLING_HEADER="# Tests and tooling"

ensure_venv() {  # ensure_venv [runtime]
  if [ ! -x "$VENV/bin/python" ]; then
    local py; py="$(pick_python)"
    log "creating virtualenv .venv with $py"
    if ! "$py" -m venv "$VENV" 2>/dev/null; then
      rm -rf "$VENV"
      apt_install python3-venv
      "$py" -m venv "$VENV"
    fi
  fi
  local want have stamp="$VENV/.requirements.sha256" req="$ROOT/requirements.txt"
  want="$(sha256sum "$req" | cut -d' ' -f1)"
  have="$(cat "$stamp" 2>/dev/null || true)"
  [ "$want" = "$have" ] && return  # the whole file is installed (so is its first part)
  if [ "${1:-}" = runtime ]; then
    req="$VENV/requirements-runtime.txt" stamp="$VENV/.requirements-runtime.sha256"
    awk -v header="$REQUIREMENTS_TOOLING_HEADER" 'index($0, header) == 1 { exit } { print }' \
      "$ROOT/requirements.txt" > "$req"
    want="$(sha256sum "$req" | cut -d' ' -f1)"
    have="$(cat "$stamp" 2>/dev/null || true)"
    [ "$want" = "$have" ] && return
    log "installing requirements.txt: the service's packages (test.sh installs the tests' and tools')"
  else
    log "installing requirements.txt"
  fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  echo "$want" > "$stamp"
}

probe() { "$VENV/bin/python" "$ROOT/scripts/probe.py" "$@" 2>/dev/null; }

pg_bindir() {
  local bindir
  bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
    apt_install postgresql
    bindir="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
  fi
  echo "$bindir"
}

# pg_cluster_up DIR PORT: a private PostgreSQL server in .data/DIR on 127.0.0.1:PORT (made the first time).
pg_cluster_up() {
  local dir=$1 port=$2 bindir as=()
  bindir="$(pg_bindir)"
  local pgdata="$DATA/$dir"
  if [ "$(id -u)" = "0" ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home "$pgdata" postgres
    as=(runuser -u postgres --)
    mkdir -p "$DATA"
    # The server runs as `postgres`, which may not reach a checkout under a private home (/root is 0700):
    # then its data lives in /var/tmp, named after the checkout.
    if ! runuser -u postgres -- test -x "$DATA"; then
      pgdata="/var/tmp/likes-$(printf '%s' "$ROOT" | sha1sum | cut -c1-10)/$dir"
    fi
  fi
  if [ ! -f "$pgdata/PG_VERSION" ]; then
    log "initialising a private PostgreSQL in $pgdata"
    mkdir -p "$pgdata"
    [ "$(id -u)" = "0" ] && chown postgres "$pgdata"
    (cd / && "${as[@]}" "$bindir/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 >/dev/null)
  fi
  if ! (cd / && "${as[@]}" "$bindir/pg_ctl" -D "$pgdata" status >/dev/null 2>&1); then
    log "starting the private PostgreSQL of $pgdata on 127.0.0.1:$port"
    (cd / && "${as[@]}" "$bindir/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -w \
      -o "-p $port -c listen_addresses=127.0.0.1 -k $pgdata -c max_connections=200" start >/dev/null)
  fi
}

start_private_pg() { pg_cluster_up pg "$PRIVATE_PG_PORT"; }

start_private_redis() {
  command -v redis-server >/dev/null || apt_install redis-server
  mkdir -p "$DATA/redis"
  if ! probe redis "redis://127.0.0.1:$PRIVATE_REDIS_PORT/0"; then
    log "starting a private Redis on 127.0.0.1:$PRIVATE_REDIS_PORT"
    redis-server --port "$PRIVATE_REDIS_PORT" --bind 127.0.0.1 --daemonize yes --dir "$DATA/redis" \
      --pidfile "$DATA/redis/redis.pid" --logfile "$DATA/redis/redis.log" --save "" --appendonly no
    for _ in $(seq 1 50); do probe redis "redis://127.0.0.1:$PRIVATE_REDIS_PORT/0" && break; sleep 0.1; done
  fi
}

# ensure_store KIND VAR NAME LOCAL_URL PRIVATE_URL LOG: use $VAR when set (it must answer), else the
# store on its default local port, else start a private one; export VAR.
ensure_store() {
  local kind=$1 var=$2 name=$3 url=$4 private_url=$5 logfile=$6
  if [ -n "${!var:-}" ]; then
    probe "$kind" "${!var}" || die "$var is set but its server does not answer"
    return
  fi
  if probe "$kind" "$url"; then
    local where=${url#*://}
    where=${where#*@}
    log "using $name at ${where%%/*}"
  else
    "start_private_$kind"
    url=$private_url
    probe "$kind" "$url" || die "the private $name did not come up (see $logfile)"
  fi
  export "$var=$url"
}

ensure_postgres() {
  ensure_store pg DATABASE_URL PostgreSQL "${LIKES_LOCAL_PG_URL:-postgres://postgres@127.0.0.1:5432/likes}" \
    "postgres://postgres@127.0.0.1:$PRIVATE_PG_PORT/likes" .data/pg/server.log
}

ensure_redis() {
  ensure_store redis REDIS_URL Redis "${LIKES_LOCAL_REDIS_URL:-redis://127.0.0.1:6379/0}" \
    "redis://127.0.0.1:$PRIVATE_REDIS_PORT/0" .data/redis/redis.log
}

# ensure_debian_tool BINARY PACKAGE PURPOSE: a Debian package the tests need, installed (as root, with apt-get) when
# BINARY is missing; one install at a time (parallel test runs share the machine). Not fatal: without it only the
# tests that need it fail or skip, saying why.
ensure_debian_tool() {
  local binary=$1 package=$2 purpose=$3
  [ -x "$binary" ] && return
  local how="sudo apt-get install -y --no-install-recommends $package"
  if [ "$(id -u)" != "0" ]; then
    log "no $binary and not root: $purpose will be skipped; install it with: $how"
    return
  fi
  if ! command -v apt-get >/dev/null; then
    log "no $binary and no apt-get to install it: $purpose will fail"
    return
  fi
  (
    flock 9
    [ -x "$binary" ] && exit 0
    log "installing Debian packages: $package (for $purpose)"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null \
      || log "apt-get update failed; trying the package lists as they are"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
      "$package" >/dev/null || log "installing $package failed: $purpose will fail"
  ) 9>"${TMPDIR:-/tmp}/likes-apt-install.lock"
}

# Debian's Chromium, the browser the console's browser tests drive through Playwright (D56); Playwright's
# own browser download cannot work here.
CHROMIUM=/usr/bin/chromium
ensure_chromium() {
  ensure_debian_tool "$CHROMIUM" chromium "the browser tests"
}

# Debian's `promtool` (package prometheus) checks and unit-tests deploy/prometheus/alerts.yml (tests/test_alerts.py).
PROMTOOL=/usr/bin/promtool
ensure_promtool() {
  ensure_debian_tool "$PROMTOOL" prometheus "the alert rule tests"
}

# --- the scaled topology (LIKES_TOPOLOGY=scaled, issue 16) ------------------------------------------

# The second PostgreSQL server: LIKES_PG2_URL when set (it must answer), else a private one in .data/pg2.
ensure_second_postgres() {
  if [ -n "${LIKES_PG2_URL:-}" ]; then
    probe pg "$LIKES_PG2_URL" || die "LIKES_PG2_URL is set but its server does not answer"
    return
  fi
  LIKES_PG2_URL="postgres://postgres@127.0.0.1:$PRIVATE_PG2_PORT/likes"
  # One answering there already (another checkout's, or this one's) is used as it is.
  probe pg "$LIKES_PG2_URL" || pg_cluster_up pg2 "$PRIVATE_PG2_PORT"
  probe pg "$LIKES_PG2_URL" || die "the second private PostgreSQL did not come up (see its server.log)"
  export LIKES_PG2_URL
}

# The three-node Redis Cluster: LIKES_REDIS_CLUSTER_URL when set, else three private nodes in .data/cluster.
ensure_redis_cluster() {
  if [ -n "${LIKES_REDIS_CLUSTER_URL:-}" ]; then
    probe redis "$LIKES_REDIS_CLUSTER_URL" || die "LIKES_REDIS_CLUSTER_URL is set but the cluster does not answer"
    return
  fi
  command -v redis-server >/dev/null || apt_install redis-server
  local port nodes=() first
  for port in $PRIVATE_CLUSTER_PORTS; do
    nodes+=("127.0.0.1:$port")
    mkdir -p "$DATA/cluster/$port"
    if ! redis-cli -p "$port" ping >/dev/null 2>&1; then
      log "starting Redis Cluster node 127.0.0.1:$port"
      redis-server --port "$port" --bind 127.0.0.1 --daemonize yes --dir "$DATA/cluster/$port" \
        --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
        --pidfile "$DATA/cluster/$port/redis.pid" --logfile "$DATA/cluster/$port/redis.log" --save "" --appendonly no
      for _ in $(seq 1 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    fi
  done
  first=${PRIVATE_CLUSTER_PORTS%% *}
  if ! redis-cli -p "$first" cluster info 2>/dev/null | grep -q "cluster_state:ok"; then
    if [ "$(redis-cli -p "$first" cluster info 2>/dev/null | sed -n 's/^cluster_slots_assigned:\([0-9]*\).*/\1/p')" = "0" ]; then
      log "joining ${nodes[*]} into a Redis Cluster"
      redis-cli --cluster create "${nodes[@]}" --cluster-yes >/dev/null
    fi
    for _ in $(seq 1 100); do redis-cli -p "$first" cluster info 2>/dev/null | grep -q "cluster_state:ok" && break; sleep 0.1; done
    redis-cli -p "$first" cluster info 2>/dev/null | grep -q "cluster_state:ok" \
      || die "the private Redis Cluster is not ok (see .data/cluster/*/redis.log; ./scripts/stop-private.sh resets it)"
  fi
  LIKES_REDIS_CLUSTER_URL="redis+cluster://$(IFS=,; echo "${nodes[*]}")/0"
  export LIKES_REDIS_CLUSTER_URL
}

# scaled_urls DB_NAME N: N comma-separated URLs of databases DB_NAME_00.., alternating between the two
# servers (index 0 on the first, 1 on the second, ...).
scaled_urls() {
  local name=$1 n=$2 i url out=()
  for ((i = 0; i < n; i++)); do
    if ((i % 2 == 0)); then url=$DATABASE_URL; else url=$LIKES_PG2_URL; fi
    out+=("${url%/*}/$(printf '%s_%02d' "$name" "$i")")
  done
  (IFS=,; echo "${out[*]}")
}

# Point the stores at the topology: the Redis roles (REDIS_URL cache, REDIS_STREAMS_URL event log,
# CELERY_BROKER_URL) and, when scaled, the shard and partition URLs (COUNT_PARTITIONS of them).
apply_topology() {
  local base; base="$(basename "${DATABASE_URL%%\?*}")"
  case "$LIKES_TOPOLOGY" in
    single) ;;
    scaled)
      ensure_second_postgres
      ensure_redis_cluster
      export RELATION_SHARD_URLS="${RELATION_SHARD_URLS:-$(scaled_urls "${base}_rel" "${RELATION_SHARDS:-2}")}"
      export COUNT_PARTITION_URLS="${COUNT_PARTITION_URLS:-$(scaled_urls "${base}_cnt" "${COUNT_PARTITIONS:-2}")}"
      export CELERY_BROKER_URL="${CELERY_BROKER_URL:-$REDIS_URL}"
      export REDIS_URL="$LIKES_REDIS_CLUSTER_URL" REDIS_STREAMS_URL="$LIKES_REDIS_CLUSTER_URL"
      log "scaled topology: databases on ${DATABASE_URL%/*} and ${LIKES_PG2_URL%/*}, caches and streams on" \
        "the Redis Cluster ${LIKES_REDIS_CLUSTER_URL}, the Celery broker on ${CELERY_BROKER_URL##*@}"
      ;;
    *) die "LIKES_TOPOLOGY must be single or scaled (it is '$LIKES_TOPOLOGY')" ;;
  esac
  export LIKES_TOPOLOGY
}

# Bytecode for the checkout's own modules, written once: where PYTHONDONTWRITEBYTECODE is set, every process the
# service and the suite start (gunicorn and Celery workers, beat, the CLI tests' runs) would otherwise compile about
# 260 modules again, half a second of CPU each time. Up-to-date files are skipped; a stale one is simply not used.
compile_sources() {
  "$VENV/bin/python" -m compileall -q -j 0 "$ROOT/manage.py" "$ROOT/likes_project" "$ROOT/relations" \
    "$ROOT/counting" "$ROOT/reconciliation" "$ROOT/opsconsole" "$ROOT/tests" "$ROOT/bench" > /dev/null || true
}

# What the service needs, for run.sh and manage.sh: the service's packages, PostgreSQL, Redis. No test-only
# package and no browser.
setup_service() {
  cd "$ROOT"
  ensure_venv runtime
  compile_sources
  ensure_postgres
  ensure_redis
}

# Everything the tests and the benchmarks need (test.sh, bench/run.sh): the whole requirements.txt,
# PostgreSQL, Redis and Debian's Chromium for the browser tests.
setup_all() {
  cd "$ROOT"
  ensure_venv
  compile_sources
  ensure_postgres
  ensure_redis
  ensure_chromium
  ensure_promtool
}

# --- the service's environment (run.sh, manage.sh) ------------------------------------------------

# secret_file VAR FILE: export VAR from .data/FILE unless VAR is set, making FILE (0600) the first time.
secret_file() {
  local var="$1" file="$DATA/$2"
  if [ -z "${!var:-}" ]; then
    [ -f "$file" ] || (umask 077 && "$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(24))' > "$file")
    export "$var=$(cat "$file")"
  fi
}

# After setup_service: the topology's store URLs, the settings module, the port, the private secrets of this
# checkout (made once under .data/, never the public development defaults) and the host's Prometheus
# multiprocess directory. run.sh and manage.sh both call this, so a command run through manage.sh sees
# exactly the settings and stores the running service sees.
service_env() {
  apply_topology  # LIKES_TOPOLOGY=single (default) | scaled: a second PostgreSQL server and a Redis Cluster
  export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-likes_project.settings.dev}"
  export PORT="${PORT:-8000}"
  secret_file VIDEO_SERVICE_TOKEN video-service-token
  secret_file DJANGO_SECRET_KEY secret-key
  secret_file CURSOR_SIGNING_KEY cursor-signing-key
  secret_file METRICS_TOKEN metrics-token
  # One Prometheus multiprocess directory for every process of this host (D45); run.sh empties it before it
  # starts the service's processes, never while they run.
  export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$DATA/prometheus}"
}
