"""Protocol-level guards: body size, and JSON (never HTML) errors on API paths."""

from __future__ import annotations

import io
import logging

from django.conf import settings
from django.db import DatabaseError
from django.http import JsonResponse
from redis.exceptions import RedisError

from likes_project.logs import printable

logger = logging.getLogger(__name__)

# How much of an oversized chunked body is read and dropped before the 413 (past it the connection is just closed).
CHUNKED_DRAIN_MAX_BYTES = 8 * 1024 * 1024
API_PREFIXES = ("/v1/", "/internal/", "/healthz", "/readyz", "/metrics")
_STATUS_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    411: "length_required",
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


class HttpProtocolMiddleware:
    """What HTTP itself asks of every answer, before anything reads the request:
    - an API body is at most API_MAX_BODY_BYTES (SEC-1): 413 on its Content-Length, before it is read;
    - a chunked API body (no Content-Length: curl `--data-binary @-`, a generator body) is read here, up to the
      same limit, and given to the view as if it had had a length; beyond the limit, 413. Only where the server
      ends the body stream itself (`wsgi.input_terminated`, as gunicorn does); elsewhere 411 `length_required`;
    - a HEAD answer carries the GET's headers and no body (gunicorn would otherwise log and drop the bytes)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if is_api_path(request.path):
            refused = self._body_refused(request)
            if refused is not None:
                return refused
        response = self.get_response(request)
        if request.method == "HEAD" and not response.streaming and response.content:
            length = len(response.content)
            response.content = b""
            response["Content-Length"] = str(length)
        return response

    @staticmethod
    def _body_refused(request):
        limit = settings.API_MAX_BODY_BYTES
        raw = request.META.get("CONTENT_LENGTH") or ""
        if not raw and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            if not request.environ.get("wsgi.input_terminated"):
                return error_response(411, "length_required", "Send the body with a Content-Length.")
            stream = request.environ["wsgi.input"]
            body = stream.read(limit + 1)
            if len(body) > limit:
                drained = len(body)  # read on (bounded), so the client reads the answer rather than a reset
                while drained < CHUNKED_DRAIN_MAX_BYTES and (chunk := stream.read(64 * 1024)):
                    drained += len(chunk)
                return error_response(413, "payload_too_large", f"The request body exceeds {limit} bytes.")
            request.META["CONTENT_LENGTH"] = str(len(body))
            request._body, request._stream = body, io.BytesIO(body)
            return None
        try:
            length = int(raw or "0")
        except ValueError:
            return error_response(400, "invalid_content_length", "Content-Length is not a number.")
        if length > limit:
            return error_response(413, "payload_too_large", f"The request body exceeds {limit} bytes.")
        return None


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
