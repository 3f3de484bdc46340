"""One DRF exception handler renders every error as `{"code", "message", ...extra}`."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404
from redis.exceptions import RedisError
from rest_framework import exceptions as drf_exc
from rest_framework.response import Response

from likes_project.errors import DomainError

logger = logging.getLogger(__name__)

_DRF_CODES = {
    drf_exc.NotAuthenticated: "not_authenticated",
    drf_exc.AuthenticationFailed: "authentication_failed",
    drf_exc.PermissionDenied: "permission_denied",
    drf_exc.NotFound: "not_found",
    drf_exc.MethodNotAllowed: "method_not_allowed",
    drf_exc.NotAcceptable: "not_acceptable",
    drf_exc.UnsupportedMediaType: "unsupported_media_type",
    drf_exc.ParseError: "invalid_json",
    drf_exc.Throttled: "rate_limited",
    drf_exc.ValidationError: "invalid_input",
}


def envelope(code: str, message: str, status: int, headers: dict | None = None, **extra) -> Response:
    return Response({"code": code, "message": message, **extra}, status=status, headers=headers)


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        return Response(exc.as_dict(), status=exc.http_status, headers=exc.headers or None)
    if isinstance(exc, Http404):
        return envelope("not_found", "Not found.", 404)
    if isinstance(exc, DjangoPermissionDenied):
        return envelope("permission_denied", "You do not have permission to perform this action.", 403)
    if isinstance(exc, RequestDataTooBig):
        return envelope("payload_too_large", "The request body is too large.", 413)
    if isinstance(exc, drf_exc.APIException):
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
        if isinstance(exc, drf_exc.ValidationError):
            return envelope(code, "The request is invalid.", exc.status_code, details=exc.detail)
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
        return envelope(code, str(exc.detail), exc.status_code, headers=headers or None)
    if isinstance(exc, (DatabaseError, RedisError)):
        # A store that is down or timing out is the server's problem, never the client's: 503 with a
        # retry hint, and nothing was committed (each write service is one transaction).
        logger.warning("store unavailable during %s: %s", context.get("view"), exc.__class__.__name__)
        return envelope(
            "service_unavailable", "A backing store is unavailable; retry later.", 503,
            headers={"Retry-After": "1"},
        )
    return None
