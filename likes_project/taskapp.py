"""The Celery app, configured from Django's settings (the CELERY_* names). `likes_project.celery`, the
module `celery -A likes_project` loads, wires it up (task discovery, signal receivers) and imports modules
that send tasks; those modules (`likes_project.nudge`) take the app from here, below that wiring."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "likes_project.settings.production")

app = Celery("likes_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
