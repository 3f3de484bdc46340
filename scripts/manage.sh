#!/usr/bin/env bash
# manage.py against the service ./scripts/run.sh runs: the same settings module, secrets and store URLs,
# computed by the same functions of lib.sh (setup_service, service_env).
#
#   ./scripts/manage.sh help                                   # every command
#   ./scripts/manage.sh reconcile --mode identity --all --json
#   LIKES_TOPOLOGY=scaled ./scripts/manage.sh switch list      # the variables run.sh was started with, if any
#
# The arguments go to manage.py unchanged and it runs in the caller's directory (a relative --out FILE is
# yours); the setup's messages go to stderr, so stdout is manage.py's own; the exit status is manage.py's.
set -euo pipefail
CALLER_DIR="$PWD"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
{
  setup_service
  service_env
} >&2
cd "$CALLER_DIR"
exec "$VENV/bin/python" "$ROOT/manage.py" "$@"
