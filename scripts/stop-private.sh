#!/usr/bin/env bash
# Stop the private PostgreSQL and Redis that run.sh/test.sh started under .data/ (if any).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="$ROOT/.data"
if [ -f "$DATA/pg/PG_VERSION" ]; then
  bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  as=(); [ "$(id -u)" = "0" ] && as=(runuser -u postgres --)
  "${as[@]}" "$bindir/pg_ctl" -D "$DATA/pg" stop -m fast && echo "private PostgreSQL stopped"
fi
if [ -f "$DATA/redis/redis.pid" ]; then
  redis-cli -p "${PRIVATE_REDIS_PORT:-56379}" shutdown nosave 2>/dev/null && echo "private Redis stopped"
fi
exit 0
