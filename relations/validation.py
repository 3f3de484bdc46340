"""Input shapes shared by the API, the management commands and the admin (architecture §8)."""

from __future__ import annotations

import datetime as dt
import re

from django.utils.dateparse import parse_datetime

from likes_project.errors import InvalidInput
from relations.models import RelationState, VideoStatus, VideoVisibility

VIDEO_ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
OPERATION_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def video_id(value) -> str:
    if not isinstance(value, str) or not VIDEO_ID_RE.fullmatch(value):
        raise InvalidInput("videoId must be 1-64 characters of [A-Za-z0-9_.:-].", code="invalid_video_id")
    return value


def operation_id(value, *, field: str = "Idempotency-Key") -> str:
    # A header that is present but empty is malformed, not missing.
    if value is None:
        raise InvalidInput(f"The {field} header is required.", code="missing_idempotency_key")
    if not isinstance(value, str) or not OPERATION_ID_RE.fullmatch(value):
        raise InvalidInput(f"{field} must be 1-128 characters of [A-Za-z0-9._:-].", code="invalid_idempotency_key")
    return value


def desired_state(value) -> str:
    if value not in (RelationState.LIKED, RelationState.UNLIKED) or not isinstance(value, str):
        raise InvalidInput('desiredState must be "LIKED" or "UNLIKED".', code="invalid_desired_state")
    return str(value)


def strict_int(value, *, field: str, code: str, minimum: int | None = None) -> int:
    # bool is an int subclass in Python; JSON true/false is not a number here.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{field} must be an integer.", code=code)
    if (minimum is not None and value < minimum) or value > INT64_MAX or value < INT64_MIN:
        bound = f" >= {minimum}" if minimum is not None else ""
        raise InvalidInput(f"{field} must be an integer{bound} that fits in 64 bits.", code=code)
    return value


def storable_text(value) -> bool:
    """PostgreSQL text holds no NUL character, and a lone surrogate (legal in JSON `\\ud800`) has no
    UTF-8 encoding: either would fail in the driver, a 5xx for what is bad input."""
    if not isinstance(value, str) or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def device_id(value) -> str:
    if not isinstance(value, str) or len(value) > 128 or not storable_text(value):
        raise InvalidInput("deviceId must be a string of at most 128 characters, without NUL or unpaired "
                           "surrogates.", code="invalid_device_id")
    return value


def visibility(value) -> str:
    if value not in VideoVisibility.values:
        raise InvalidInput(f"visibility must be one of {VideoVisibility.values}.", code="invalid_visibility")
    return value


def video_status(value) -> str:
    if value not in VideoStatus.values:
        raise InvalidInput(f"status must be one of {VideoStatus.values}.", code="invalid_status")
    return value


def published_at(value) -> dt.datetime | None:
    """A video's publication time as the service sends it: ISO 8601 with its offset, or absent (None)."""
    if value is None:
        return None
    parsed = None
    if isinstance(value, str) and len(value) <= 64 and storable_text(value):
        try:
            parsed = parse_datetime(value)
        except ValueError:  # well formed but out of range (a 25th hour)
            parsed = None
    if parsed is None or parsed.tzinfo is None or not 2000 <= parsed.year <= 9999:
        raise InvalidInput("publishedAt must be an ISO 8601 date and time with its offset "
                           "(2026-12-06T18:00:00Z).", code="invalid_published_at")
    return parsed
