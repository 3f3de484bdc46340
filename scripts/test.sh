#!/usr/bin/env bash
# The whole test suite, with its own setup: ./scripts/test.sh [pytest args]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup_all
# Tests keep to their own Redis database and key prefix.
export REDIS_URL="${TEST_REDIS_URL:-${REDIS_URL%/*}/15}"
export DJANGO_SETTINGS_MODULE=likes_project.settings.test
echo "[test] ruff check"
"$VENV/bin/ruff" check .
echo "[test] pytest"
# Test databases and the test Redis prefix are shared per server (across checkouts): one run at a time.
LOCK="${TMPDIR:-/tmp}/likes-test-$(printf '%s' "$DATABASE_URL" | sha1sum | cut -c1-12).lock"
if [ "$#" -gt 0 ]; then
  exec flock "$LOCK" "$VENV/bin/python" -m pytest "$@"
fi
flock "$LOCK" "$VENV/bin/python" -m pytest
# The whole suite again, on databases created by the migrations as they were before the layers issue
# squashed them (tests/legacy) and migrated forward in place.
echo "[test] pytest on upgraded databases"
LIKES_TEST_DATABASES=upgraded exec flock "$LOCK" "$VENV/bin/python" -m pytest -q --deselect tests/test_upgrade.py
