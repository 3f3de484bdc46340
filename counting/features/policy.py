"""The export's field policy (issue 31 §3, PRIV-1): which fields of a relation event its files may hold, and the
key its user pseudonyms are made with. The policy's version is in every path (`features/v1/...`) and manifest; a
change of fields is a new version, never an edit of this one."""

from __future__ import annotations

import datetime as dt
import hashlib

from likes_project.cursors import iso_utc

SUBSCRIPTION = "feature-export"  # the built-in subscription whose position and key the export uses
OWNER = "offline-features"
ACTOR = "feature-export"  # the system actor of the beat job (creation, rewrites)
VERSION = 1
# What the subscription is granted: the user by the subscription's own pseudonym (HMAC-SHA256 under its key, "the
# export key"), never by id. `eventId` and `type` come with every event.
FIELDS = ("userPseudonym", "videoId", "state", "relationVersion", "stateChangedAt")
ROW_FIELDS = ("eventId", "type", *FIELDS)  # every key a row may have


def field_policy() -> dict:
    return {"version": VERSION, "fields": list(ROW_FIELDS)}


def key_id(pseudonym_key: str) -> str:
    """Names the export key in a manifest without revealing it: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(pseudonym_key.encode()).hexdigest()[:12]


def iso_ms(ms: int) -> str:
    return iso_utc(dt.datetime.fromtimestamp(ms / 1000, dt.UTC))


def when(text: str) -> dt.datetime:
    """A manifest's instant (ISO 8601, `Z`) as an aware datetime; ValueError when it is not one."""
    out = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if out.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return out
