"""gunicorn hooks of the web tier (issue 10 §1, D45):
`gunicorn -c python:likes_project.gunicorn_conf likes_project.wsgi:application --bind … --workers …`.

Importing `likes_project.metrics` here, in the master and before any worker forks, puts
PROMETHEUS_MULTIPROC_DIR (default `<repo>/.data/prometheus`) into the environment every worker
inherits, so each worker writes its own metric files there and a scrape of any of them sums them all.
When a worker exits, `child_exit` drops its live gauges; its counters and histograms stay in the sums.

Nothing here empties the directory: Celery processes of the same host write into it too, and a
gunicorn restart must not delete their files (their counters would vanish from the sums until they
restarted, and their later increments would go to files nobody reads). The directory is emptied only
when no process of the host runs, by the start script before it starts them (D45).
"""

from __future__ import annotations

import os

from likes_project import metrics
from likes_project.logs import logging_config

# gunicorn's own lines (master and workers) in our format (D47); the application writes the access line
# (with request_id and user_id), so gunicorn's access logger stays quiet.
logconfig_dict = logging_config(level=os.environ.get("LOG_LEVEL", "INFO"), fmt=os.environ.get("LOG_FORMAT", "json"))


def on_starting(server) -> None:
    server.log.info("prometheus multiprocess directory: %s", metrics.MULTIPROC_DIR)


def child_exit(server, worker) -> None:
    metrics.mark_process_dead(worker.pid)

# The worker model (issue 15 §1, D85): measured on 2 cores, 4 `gthread` workers x 4 threads served no more
# commands/s than 4 `sync` workers (the request path is CPU-bound in Python, so threads of one worker
# contend for its GIL) and hold 4x the database connections, hence sync by default. Both are settable;
# the command path is thread-safe.
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "sync")
threads = int(os.environ.get("GUNICORN_THREADS", "1"))

# gunicorn's control socket defaults to one path per host user (~/.gunicorn/gunicorn.ctl), which two instances
# on one host (a dev server beside the suite's, two test workers) take from each other. We use no control
# command, so it is off unless GUNICORN_CONTROL_SOCKET names a path of this instance's own (D100).
control_socket = os.environ.get("GUNICORN_CONTROL_SOCKET", "")
control_socket_disable = not control_socket
