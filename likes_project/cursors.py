"""Opaque, signed list cursors and the time encoding they use (LIST-7, REV-7).

A cursor is a JSON object signed with CURSOR_SIGNING_KEY (and CURSOR_SIGNING_KEY_FALLBACKS while
keys rotate) under a salt naming the list, so a cursor of one list is never valid for another. Times
travel as integer microseconds since the epoch: PostgreSQL stores microseconds, so "strictly after"
never skips a tie. Anything that is not a cursor this service issued is 400 `invalid_cursor`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core import signing

from likes_project.errors import InvalidInput

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(value: datetime) -> int:
    return (value - EPOCH) // timedelta(microseconds=1)


def from_micros(value: int) -> datetime:
    """Raises OverflowError for a value no datetime can hold (a forged cursor)."""
    return EPOCH + timedelta(microseconds=value)


def iso_utc(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def invalid_cursor() -> InvalidInput:
    return InvalidInput("The cursor is not valid for this list; start again without a cursor.",
                        code="invalid_cursor")


def _signer(salt: str) -> signing.Signer:
    return signing.Signer(key=settings.CURSOR_SIGNING_KEY, salt=salt,
                          fallback_keys=getattr(settings, "CURSOR_SIGNING_KEY_FALLBACKS", []))


def cursor_sign(*, salt: str, payload: dict, compress: bool = False) -> str:
    return _signer(salt).sign_object(payload, compress=compress)


def cursor_unsign(*, salt: str, cursor: str | None, max_chars: int, version: int) -> dict:
    """The payload of a cursor signed under `salt` with format `version`; else `invalid_cursor`
    (tampered, truncated, garbage, far too long, another list's, an unknown format)."""
    if not cursor or len(cursor) > max_chars:
        raise invalid_cursor()
    try:
        payload = _signer(salt).unsign_object(cursor)
    except (signing.BadSignature, ValueError, TypeError, UnicodeError):
        raise invalid_cursor() from None
    if not isinstance(payload, dict) or payload.get("v") != version:
        raise invalid_cursor()
    return payload
