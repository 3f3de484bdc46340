"""WSGI entry point for the naive baseline over HTTP (bench only, never deployed):
the normal application with `bench.naive` installed in every gunicorn worker."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "likes_project.settings.dev")

from django.core.wsgi import get_wsgi_application

application = get_wsgi_application()

from bench import naive  # noqa: E402

naive.install(enabled=True)
