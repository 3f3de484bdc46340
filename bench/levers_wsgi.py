"""WSGI entry point of the token-authentication lever's "before" (bench only, never deployed): the normal
application with DRF's stock ORM `TokenAuthentication` in place of `relations.api.auth.UserTokenAuthentication`
(D85), so bench/levers.py can measure the one change side by side with the current code."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "likes_project.settings.dev")

from django.core.wsgi import get_wsgi_application

application = get_wsgi_application()

from rest_framework.authentication import SessionAuthentication, TokenAuthentication  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

# Every public view takes the default classes (a class attribute of APIView, read at request time).
APIView.authentication_classes = [TokenAuthentication, SessionAuthentication]
