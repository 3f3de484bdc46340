#!/usr/bin/env bash
# The whole service, with its own setup: API (gunicorn on $PORT), Celery worker, Celery beat, demo data.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup_service  # the service's packages, PostgreSQL, Redis (no test-only package, no browser: test.sh adds those)
service_env    # LIKES_TOPOLOGY's store URLs, settings module, PORT, private secrets under .data/ (as manage.sh)
# The superuser `admin`'s password: made once per checkout, set by seed_demo on every start.
[ -f "$DATA/admin-password" ] || (umask 077 && "$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(12))' > "$DATA/admin-password")
PY="$VENV/bin/python"

"$PY" manage.py migrate_all
"$PY" manage.py collectstatic --noinput -v 0
"$PY" manage.py seed_demo --admin-password "$(cat "$DATA/admin-password")"
echo
echo "Admin console: http://127.0.0.1:$PORT/admin/  (user admin, password in .data/admin-password: $(cat "$DATA/admin-password"))"
echo "Video service token (internal API): $VIDEO_SERVICE_TOKEN"
echo "Metrics token (GET /metrics, /readyz detail): in .data/metrics-token"
echo "API docs: http://127.0.0.1:$PORT/v1/docs"
echo "Demo feed (log in with a demo user's token, printed above): http://127.0.0.1:$PORT/demo/feed"
echo

# The Prometheus multiprocess directory of this host (service_env; D45), emptied here while none of the
# service's processes runs.
rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"

pids=()
cleanup() { trap - INT TERM EXIT; kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup INT TERM EXIT
"$VENV/bin/celery" -A likes_project worker --loglevel "${CELERY_LOGLEVEL:-WARNING}" -Q publish,count,relcache,reverse,notify,risk,snapshot,maintenance,ops,celery \
  --concurrency "${CELERY_CONCURRENCY:-4}" &
pids+=($!)
"$VENV/bin/celery" -A likes_project beat --loglevel "${CELERY_LOGLEVEL:-WARNING}" &
pids+=($!)
"$VENV/bin/gunicorn" -c python:likes_project.gunicorn_conf likes_project.wsgi:application --bind "0.0.0.0:$PORT" \
  --workers "${WEB_CONCURRENCY:-4}" --timeout 30 &
pids+=($!)
echo "[run] web on :$PORT, worker and beat started (Ctrl-C stops all)"
wait -n "${pids[@]}"
