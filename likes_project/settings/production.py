"""Production settings, the default of every entry point (manage.py, wsgi, asgi, celery): refuse to
start without the secrets, the cursor key, the video service token and the allowed hosts, naming each
one missing; never accept a development value."""

import os
import sys

from likes_project.settings.guards import refuse_dev_secrets, require_production

require_production(os.environ, sys.argv)

from likes_project.settings.base import *  # noqa: E402, F403

DEBUG = False
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

refuse_dev_secrets(globals())
