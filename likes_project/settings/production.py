"""Production settings: refuse insecure defaults."""

import os

from likes_project.settings.base import *  # noqa: F403

if not os.environ.get("DJANGO_SECRET_KEY"):
    raise RuntimeError("DJANGO_SECRET_KEY must be set in production")
if not os.environ.get("VIDEO_SERVICE_TOKEN"):
    raise RuntimeError("VIDEO_SERVICE_TOKEN must be set in production")
DEBUG = False
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
