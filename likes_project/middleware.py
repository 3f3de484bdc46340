"""Protocol-level guards: body size, and JSON (never HTML) errors on API paths."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError
from django.http import JsonResponse
from redis.exceptions import RedisError

from likes_project.logs import printable

logger = logging.getLogger(__name__)

API_PREFIXES = ("/v1/", "/internal/", "/healthz", "/readyz", "/metrics")
_STATUS_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    500: "internal_error",
    503: "service_unavailable",
}


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES)


def error_response(status: int, code: str | None = None, message: str | None = None, **extra) -> JsonResponse:
    return JsonResponse(
        {"code": code or _STATUS_CODES.get(status, "error"), "message": message or "Request failed.", **extra},
        status=status,
    )


class RequestSizeLimitMiddleware:
    """Refuses an oversized API body before anything reads it (SEC-1)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if is_api_path(request.path):
            raw = request.META.get("CONTENT_LENGTH") or "0"
            try:
                length = int(raw)
            except ValueError:
                return error_response(400, "invalid_content_length", "Content-Length is not a number.")
            if length > settings.API_MAX_BODY_BYTES:
                return error_response(
                    413, "payload_too_large",
                    f"The request body exceeds {settings.API_MAX_BODY_BYTES} bytes.",
                )
        return self.get_response(request)


class JsonErrorMiddleware:
    """API paths answer JSON envelopes even for errors raised outside DRF (unknown URLs, crashes)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            is_api_path(request.path)
            and response.status_code >= 400
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            status = response.status_code
            # A DRF error negotiated to the browsable API (`Accept: text/html`) still carries its
            # envelope in `.data`: keep its code and the headers a client acts on.
            data = getattr(response, "data", None)
            if isinstance(data, dict) and isinstance(data.get("code"), str):
                replacement = JsonResponse(data, status=status)
            else:
                replacement = error_response(status, message=_STATUS_MESSAGES.get(status, "Request failed."))
            for header in _KEPT_HEADERS:
                if header in response:
                    replacement[header] = response[header]
            return replacement
        return response

    def process_exception(self, request, exception):
        if not is_api_path(request.path):
            return None
        if isinstance(exception, (DatabaseError, RedisError)):
            # The path is the client's: escaped, so a `%0A` in it cannot start a fake log line.
            logger.warning("store unavailable on %s: %s", printable(request.path), exception.__class__.__name__)
            resp = error_response(503, "service_unavailable", "A backing store is unavailable; retry later.")
            resp["Retry-After"] = "1"
            return resp
        logger.exception("unhandled error on %s", printable(request.path))
        return error_response(500, "internal_error", "Internal error.")


_KEPT_HEADERS = ("WWW-Authenticate", "Retry-After", "Allow")
_STATUS_MESSAGES = {
    400: "Bad request.",
    404: "Not found.",
    405: "Method not allowed.",
    413: "The request body is too large.",
    500: "Internal error.",
}
