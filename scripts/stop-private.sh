#!/usr/bin/env bash
# Stop the private PostgreSQL and Redis that run.sh/test.sh started under .data/ (if any).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="$ROOT/.data"
bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
as=(); [ "$(id -u)" = "0" ] && as=(runuser -u postgres --)
# pg2: the second server of LIKES_TOPOLOGY=scaled; /var/tmp/likes-*: where lib.sh puts them when the
# postgres user cannot reach this checkout.
for pgdata in "$DATA/pg" "$DATA/pg2" "/var/tmp/likes-$(printf '%s' "$ROOT" | sha1sum | cut -c1-10)"/pg*; do
  if [ -f "$pgdata/PG_VERSION" ]; then
    (cd / && "${as[@]}" "$bindir/pg_ctl" -D "$pgdata" stop -m fast) && echo "private PostgreSQL of $pgdata stopped"
  fi
done
if [ -f "$DATA/redis/redis.pid" ]; then
  redis-cli -p "${PRIVATE_REDIS_PORT:-16379}" shutdown nosave 2>/dev/null && echo "private Redis stopped"
fi
# The Redis Cluster of LIKES_TOPOLOGY=scaled: its nodes, and their cluster state (the next run creates it anew).
for dir in "$DATA"/cluster/*/; do
  [ -d "$dir" ] || continue
  port="$(basename "$dir")"
  redis-cli -p "$port" shutdown nosave 2>/dev/null && echo "private Redis Cluster node $port stopped"
done
rm -rf "$DATA/cluster"
exit 0
