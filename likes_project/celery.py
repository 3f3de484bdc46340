import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "likes_project.settings.dev")

app = Celery("likes_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
