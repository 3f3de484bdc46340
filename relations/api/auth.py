"""Service-to-service authentication for the internal API the video service pushes to."""

from __future__ import annotations

import hmac

from django.conf import settings
from rest_framework import authentication, permissions

from likes_project.errors import Forbidden

_SCHEMES = ("bearer", "service", "token")


class VideoServicePrincipal:
    """The authenticated video service. Not a user: it owns no relations."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    pk = None
    id = None
    username = "video-service"

    def __str__(self) -> str:
        return self.username


class ServiceTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <VIDEO_SERVICE_TOKEN>` (or `Service`/`Token` scheme, or the
    `X-Service-Token` header). Anything else is left to the next authenticator."""

    def authenticate(self, request):
        expected = settings.VIDEO_SERVICE_TOKEN
        if not expected:
            return None
        if not settings.DEBUG and expected == settings.DEV_VIDEO_SERVICE_TOKEN:
            # The settings guard refuses to start like this; should a deployment get here anyway (a settings
            # module of its own), the public development token still opens nothing (issue 10 §2).
            return None
        presented = request.headers.get("X-Service-Token")
        if presented is None:
            scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() not in _SCHEMES:
                return None
            presented = credential.strip()
        if presented and hmac.compare_digest(presented.encode(), expected.encode()):
            return VideoServicePrincipal(), None
        return None

    def authenticate_header(self, request):
        return 'Bearer realm="internal"'


class ServiceTokenRequired(Forbidden):
    code = "service_token_required"
    default_message = "This endpoint is for the video service only."


class IsVideoService(permissions.BasePermission):
    def has_permission(self, request, view):
        user = request.user
        if user is None or not user.is_authenticated:
            return False  # DRF turns this into 401 not_authenticated
        if not isinstance(user, VideoServicePrincipal):
            raise ServiceTokenRequired()
        return True
