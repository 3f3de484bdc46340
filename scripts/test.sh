#!/usr/bin/env bash
# The whole test suite, with its own setup: ./scripts/test.sh [pytest args]
#
# With no arguments and LIKES_TOPOLOGY unset it runs every pass (issue 28, D100), each on TEST_WORKERS
# pytest-xdist workers (a database set and a Redis key prefix each):
#   single     the whole suite on fresh databases (every database on one PostgreSQL server, Redis on one node);
#   upgraded   the `schema` tests on databases the landed migrations created, migrated forward in place;
#   scaled     the `topology` tests on a second PostgreSQL server and a three-node Redis Cluster;
#   new-shard  the slot moves again onto a third relation shard contract v1 leaves empty.
# LIKES_TOPOLOGY=single runs the first two, LIKES_TOPOLOGY=scaled the last two. At the end it prints each pass's
# wall time and the 25 slowest tests, writes both to .data/test-report.txt, and warns when the run is over budget.
#
# With pytest arguments it runs only those, on LIKES_TOPOLOGY (default single), in parallel unless they say
# otherwise: ./scripts/test.sh tests/relations -x;  ./scripts/test.sh tests/test_drills.py -n 0 -s (one process).
set -euo pipefail
TOPOLOGY_REQUESTED="${LIKES_TOPOLOGY:-}"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup_all
# Tests keep to their own Redis database and key prefix on the plain Redis (the Celery broker's, and on
# `single` every role's); a Cluster has database 0 only, where the key prefix keeps them apart. Each xdist
# worker adds its name to the prefix and has a broker database of its own (settings/test.py).
export REDIS_URL="${TEST_REDIS_URL:-${REDIS_URL%/*}/15}"
export DJANGO_SETTINGS_MODULE=likes_project.settings.test
# Three count partitions (the third is where a bucket migration scales out to; settings/test.py).
export COUNT_PARTITIONS="${COUNT_PARTITIONS:-3}"
# Parallel workers: the tests mostly wait on PostgreSQL, Redis and the processes they start, so more workers
# than cores pay on 2 cores (docs/benchmarks.md, "Test suite"). At most 14 (a broker database each).
TEST_WORKERS="${TEST_WORKERS:-3}"
# The whole run's budget (issue 28): over it, the report says so loudly; the run does not fail for it.
TEST_BUDGET_S="${TEST_BUDGET_S:-900}"
REPORT="$DATA/test-report.txt"
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
    # The metric files of this run's processes only, in a directory of its own (D141): `likes_project` imports its
    # metrics before any settings module, so the test settings cannot choose it, and the checkout's
    # .data/prometheus holds every earlier run's and benchmark's files, which each /metrics scrape reads.
    PROMETHEUS_MULTIPROC_DIR=$(mktemp -d "${TMPDIR:-/tmp}/likes-test-prometheus-XXXXXX")
    export PROMETHEUS_MULTIPROC_DIR
    trap 'rm -rf "$PROMETHEUS_MULTIPROC_DIR"' EXIT
    flock "$LOCK" "$VENV/bin/python" -m pytest -n "$TEST_WORKERS" --dist loadgroup "$@"
  )
}

if [ "$#" -gt 0 ]; then
  on "$LIKES_TOPOLOGY" "$@"
  exit
fi

# Each pass's per-test times stay in .data/test-junit/ for a closer look (scripts/test_report.py reads them).
JUNIT_DIR="$DATA/test-junit"
rm -rf "$JUNIT_DIR" && mkdir -p "$JUNIT_DIR"
PASSES=()   # "name seconds exit-status" per pass
FAILED=0
RUN_STARTED=$(date +%s%N)
# run_pass NAME TOPOLOGY PYTEST-ARGS...: one pass, timed, its per-test times kept for the report.
run_pass() {
  local name=$1 topology=$2 started status=0
  shift 2
  echo "[test] pass $name ($topology, $TEST_WORKERS workers): pytest $*"
  started=$(date +%s%N)
  on "$topology" -q --junitxml="$JUNIT_DIR/$name.xml" "$@" || status=$?
  PASSES+=("$name $(( ($(date +%s%N) - started) / 1000000 )) $status")  # milliseconds
  [ "$status" = 0 ] || FAILED=1
}
run_single() {
  # tests/test_upgrade.py builds scratch database sets of its own, whatever the pass: it runs once, in `upgraded`.
  run_pass single single --ignore=tests/test_upgrade.py
  # The `schema` tests again, on databases created by the migrations as they were before their second squash
  # (D133; tests/legacy) and migrated forward in place: the SQL the schema carries (functions,
  # triggers, constraints, grants) and tests/test_upgrade.py's object-by-object comparison (D95, D100).
  LIKES_TEST_DATABASES=upgraded run_pass upgraded single -m schema
}
run_scaled() {
  run_pass scaled scaled -m topology
  # The slot moves again with a third relation shard configured that contract v1 leaves empty, the way a
  # scale-out adds one: the moves go from rel_01 (second server) onto rel_02 (first server).
  RELATION_SHARDS=3 RELATION_CONTRACT_SHARDS=rel_00,rel_01 run_pass new-shard scaled tests/relations/test_slot_move.py
}
case "$TOPOLOGY_REQUESTED" in
  single) run_single ;;
  scaled) run_scaled ;;
  "") run_single; run_scaled ;;
  *) die "LIKES_TOPOLOGY must be single or scaled (it is '$TOPOLOGY_REQUESTED')" ;;
esac
"$VENV/bin/python" "$ROOT/scripts/test_report.py" --junit-dir "$JUNIT_DIR" --out "$REPORT" \
  --budget-s "$TEST_BUDGET_S" --workers "$TEST_WORKERS" \
  --total-ms $(( ($(date +%s%N) - RUN_STARTED) / 1000000 )) "${PASSES[@]}"
exit "$FAILED"
