#!/usr/bin/env bash
# The whole service, with its own setup: API (gunicorn on $PORT), Celery worker, Celery beat, demo data.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup_all
apply_topology  # LIKES_TOPOLOGY=single (default) | scaled: a second PostgreSQL server and a Redis Cluster
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-likes_project.settings.dev}"
export PORT="${PORT:-8000}"
# Private secrets of this checkout, made once under .data/ (never the public development defaults).
secret_file() {  # secret_file VAR FILE: export VAR from FILE unless set, making FILE the first time
  local var="$1" file="$DATA/$2"
  if [ -z "${!var:-}" ]; then
    [ -f "$file" ] || (umask 077 && "$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(24))' > "$file")
    export "$var=$(cat "$file")"
  fi
}
secret_file VIDEO_SERVICE_TOKEN video-service-token
secret_file DJANGO_SECRET_KEY secret-key
secret_file CURSOR_SIGNING_KEY cursor-signing-key
secret_file METRICS_TOKEN metrics-token
[ -f "$DATA/admin-password" ] || "$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(12))' > "$DATA/admin-password"
PY="$VENV/bin/python"

"$PY" manage.py migrate_all
"$PY" manage.py collectstatic --noinput -v 0
"$PY" manage.py seed_demo --admin-password "$(cat "$DATA/admin-password")"
echo
echo "Admin console: http://127.0.0.1:$PORT/admin/  (user admin, password in .data/admin-password: $(cat "$DATA/admin-password"))"
echo "Video service token (internal API): $VIDEO_SERVICE_TOKEN"
echo "Metrics token (GET /metrics, /readyz detail): in .data/metrics-token"
echo "API docs: http://127.0.0.1:$PORT/v1/docs"
echo

# One Prometheus multiprocess directory for the web workers and Celery processes of this host (D45),
# emptied here while none of them runs.
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$DATA/prometheus}"
rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"

pids=()
cleanup() { trap - INT TERM EXIT; kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup INT TERM EXIT
"$VENV/bin/celery" -A likes_project worker --loglevel "${CELERY_LOGLEVEL:-WARNING}" -Q publish,count,relcache,reverse,snapshot,maintenance,ops,celery \
  --concurrency "${CELERY_CONCURRENCY:-4}" &
pids+=($!)
"$VENV/bin/celery" -A likes_project beat --loglevel "${CELERY_LOGLEVEL:-WARNING}" &
pids+=($!)
"$VENV/bin/gunicorn" -c python:likes_project.gunicorn_conf likes_project.wsgi:application --bind "0.0.0.0:$PORT" \
  --workers "${WEB_CONCURRENCY:-4}" --timeout 30 &
pids+=($!)
echo "[run] web on :$PORT, worker and beat started (Ctrl-C stops all)"
wait -n "${pids[@]}"
