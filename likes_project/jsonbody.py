"""Strict JSON body parsing for the API: any malformed body is a 400 with a stable code."""

from __future__ import annotations

import json

from django.conf import settings

from likes_project.errors import DomainError, InvalidInput


class PayloadTooLarge(DomainError):
    code = "payload_too_large"
    http_status = 413
    default_message = "The request body is too large."


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def parse_json_object(raw: bytes) -> dict:
    if len(raw) > settings.API_MAX_BODY_BYTES:
        raise PayloadTooLarge()
    if not raw.strip():
        raise InvalidInput("A JSON object body is required.", code="invalid_json")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidInput("The body is not valid JSON.", code="invalid_json") from exc
    if not isinstance(data, dict):
        raise InvalidInput("The body must be a JSON object.", code="invalid_body")
    return data
