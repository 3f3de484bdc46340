"""Service-to-service authentication for the internal API the video service pushes to."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from rest_framework import authentication, exceptions, permissions
from rest_framework.authtoken.models import Token

from likes_project.errors import Forbidden
from relations.models import AccountStatus

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


class UserTokenAuthentication(authentication.TokenAuthentication):
    """DRF's `Authorization: Token <key>`, the same answers, in one raw statement: the token and its
    user are read together, without the ORM's query compilation (it runs on every API call; issue 15).
    Nothing is cached, so a deleted token or a deactivated user is refused on the very next call."""

    _sql: str | None = None

    def authenticate(self, request):
        """`Token <key>`, or `Bearer <key>` (what most HTTP clients send). A header in another shape is a wrong
        token (401 `authentication_failed`, "Invalid token."), never "credentials were not provided"; `Basic`
        is left alone (a proxy's own credentials) and no header at all leaves the request anonymous."""
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() == b"basic":
            return None
        if parts[0].lower() not in (b"token", b"bearer") or len(parts) != 2:
            raise exceptions.AuthenticationFailed("Invalid token.")
        try:
            key = parts[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        return self.authenticate_credentials(key)

    @classmethod
    def _statement(cls) -> str:
        if cls._sql is None:
            user = get_user_model()
            columns = ", ".join(f"u.{f.column}" for f in user._meta.concrete_fields)
            # The account's risk level rides along (issue 32 §1): a frozen account's command is refused without a
            # read of its own.
            cls._sql = (f"SELECT t.created, COALESCE(a.risk_level, 'none'), {columns} FROM {Token._meta.db_table} t "
                        f"JOIN {user._meta.db_table} u ON u.{user._meta.pk.column} = t.user_id "
                        f"LEFT JOIN {AccountStatus._meta.db_table} a ON a.user_id = t.user_id WHERE t.key = %s")
        return cls._sql

    def authenticate_credentials(self, key):
        with connections["default"].cursor() as cursor:
            cursor.execute(self._statement(), [key])
            row = cursor.fetchone()
        if row is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        model = get_user_model()
        user = model.from_db("default", [f.attname for f in model._meta.concrete_fields], row[2:])
        user.likes_risk_level = row[1]
        if not user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        token = Token.from_db("default", ["key", "user_id", "created"], [key, user.pk, row[0]])
        token.user = user
        return user, token


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
