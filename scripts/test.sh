#!/usr/bin/env bash
# The whole test suite, with its own setup: ./scripts/test.sh [pytest args]
#
# With LIKES_TOPOLOGY unset it runs the suite on both topologies (issue 16): `single` (every database on
# one PostgreSQL server, Redis on one node), fresh and (the store-facing tests) on upgraded databases, then
# `scaled` (a second PostgreSQL server, a three-node Redis Cluster). LIKES_TOPOLOGY=single|scaled runs that one only; with
# pytest arguments, only those, on LIKES_TOPOLOGY (default single).
set -euo pipefail
TOPOLOGY_REQUESTED="${LIKES_TOPOLOGY:-}"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup_all
# Tests keep to their own Redis database and key prefix on the plain Redis (the Celery broker's, and on
# `single` every role's); a Cluster has database 0 only, where the key prefix keeps them apart.
export REDIS_URL="${TEST_REDIS_URL:-${REDIS_URL%/*}/15}"
export DJANGO_SETTINGS_MODULE=likes_project.settings.test
# Three count partitions (the third is where a bucket migration scales out to; settings/test.py).
export COUNT_PARTITIONS="${COUNT_PARTITIONS:-3}"
echo "[test] ruff check"
"$VENV/bin/ruff" check .
# Test databases and the test Redis prefix are shared per server (across checkouts): one run at a time.
LOCK="${TMPDIR:-/tmp}/likes-test-$(printf '%s' "$DATABASE_URL" | sha1sum | cut -c1-12).lock"

# on TOPOLOGY PYTEST-ARGS...: one pytest run on a topology, in a subshell (the topology's URLs stay there).
on() {
  local topology=$1
  shift
  (
    LIKES_TOPOLOGY=$topology
    apply_topology
    flock "$LOCK" "$VENV/bin/python" -m pytest "$@"
  )
}

if [ "$#" -gt 0 ]; then
  on "$LIKES_TOPOLOGY" "$@"
  exit
fi
UPGRADED_PASS_TESTS=(tests/relations tests/counting tests/reconciliation tests/test_audit_append_only.py
  tests/test_audit_chain.py tests/test_schema_public.py tests/test_generations.py tests/test_redrive.py)
run_single() {
  echo "[test] pytest (single)"
  on single
  # The store-facing tests again, on databases created by the migrations as they were before the layers
  # issue squashed them (tests/legacy) and migrated forward in place: every test of the SQL the schema
  # carries (functions, triggers, constraints, grants). Browser flows and drills stay on the fresh pass
  # and on `scaled`; tests/test_upgrade.py compares the two schemas object by object (D95).
  echo "[test] pytest on upgraded databases (single, the store-facing tests)"
  LIKES_TEST_DATABASES=upgraded on single -q "${UPGRADED_PASS_TESTS[@]}" --ignore-glob='*_browser.py'
}
run_scaled() {
  echo "[test] pytest (scaled: two PostgreSQL servers, a three-node Redis Cluster)"
  on scaled
  # The slot moves again with a third relation shard configured that contract v1 leaves empty, the way a
  # scale-out adds one: the moves go from rel_01 (second server) onto rel_02 (first server).
  echo "[test] pytest (scaled: slot moves onto a new, empty relation shard rel_02)"
  RELATION_SHARDS=3 RELATION_CONTRACT_SHARDS=rel_00,rel_01 on scaled -q tests/relations/test_slot_move.py
}
case "$TOPOLOGY_REQUESTED" in
  single) run_single ;;
  scaled) run_scaled ;;
  "") run_single; run_scaled ;;
  *) die "LIKES_TOPOLOGY must be single or scaled (it is '$TOPOLOGY_REQUESTED')" ;;
esac
