import os

from celery import Celery

from likes_project import logs, nudge

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "likes_project.settings.production")

app = Celery("likes_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Our LOGGING in worker and beat; task_id, task name and the enqueuing request's id on every task line.
logs.celery_connect()
# A nudged task clears its "queued" flag when it starts (cross-process nudge coalescing, D89).
nudge.celery_connect()
