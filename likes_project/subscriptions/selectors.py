"""Reads of subscriptions (issue 31 §1): a page of events for a pull, in the subscription's allowed fields, with
an opaque cursor that covers every partition; and what `subscription_show` and the console print."""

from __future__ import annotations

import time
from dataclasses import dataclass

from likes_project.cursors import cursor_sign, cursor_unsign, invalid_cursor, iso_utc
from likes_project.eventlog import streams
from likes_project.subscriptions.models import Subscription, SubscriptionNotice
from likes_project.subscriptions.services import acked_positions, device_pseudonym, lag_seconds, pseudonym

CURSOR_VERSION = 1
CURSOR_MAX_CHARS = 4096
RELATION_EVENT = "LikeRelationChanged"  # the relation event's eventType on the log (relations.events)
TYPES = {RELATION_EVENT: "like.relation_changed"}


@dataclass(frozen=True)
class Page:
    events: list[dict]
    next_cursor: str
    lag_seconds: float


def _salt(sub: Subscription) -> str:
    return f"likes.subscription.{sub.name}.{sub.pk}"  # another subscription's cursor never verifies here


@dataclass(frozen=True)
class Position:
    """Where a pull stands: the last entry per partition of the log, and the last notice (their ids grow)."""

    partitions: dict[int, str]
    notices: int


def cursor_encode(sub: Subscription, at: Position) -> str:
    return cursor_sign(salt=_salt(sub), compress=True, payload={
        "v": CURSOR_VERSION, "p": {str(p): i for p, i in at.partitions.items()}, "n": at.notices})


def cursor_decode(sub: Subscription, cursor: str) -> Position:
    payload = cursor_unsign(salt=_salt(sub), cursor=cursor, max_chars=CURSOR_MAX_CHARS, version=CURSOR_VERSION)
    try:
        out = {int(p): str(i) for p, i in payload["p"].items()}
        for i in out.values():
            streams.entry_id_key(i)
        notices = payload["n"]
    except (AttributeError, KeyError, TypeError, ValueError):
        raise invalid_cursor() from None
    if set(out) != set(streams.all_partitions()) or not isinstance(notices, int):
        raise invalid_cursor()
    return Position(out, notices)


def _user(sub: Subscription, user_id) -> dict:
    """The user as the subscription may name them: by id, by its pseudonym, or not at all."""
    if "userId" in sub.fields:
        return {"userId": user_id}
    if "userPseudonym" in sub.fields:
        return {"userPseudonym": pseudonym(sub, user_id) if isinstance(user_id, int) else None}
    return {}


def shaped(sub: Subscription, event: dict) -> dict | None:
    """The event as the subscription may see it: `eventId`, `type` and its allowed fields only; None for an
    entry that is not an event it receives (it is skipped, and the cursor passes it)."""
    kind = TYPES.get(event.get("eventType"))
    if kind is None:
        return None
    device = event.get("deviceId")  # "" (none named) or absent (an event from before v3 of the command)
    values = {"videoId": event.get("videoId"), "state": event.get("absoluteState"),
              "relationVersion": event.get("relationVersion"), "stateChangedAt": event.get("stateChangedAt"),
              "device": device_pseudonym(sub, device) if device else None, **_user(sub, event.get("userId"))}
    return {"eventId": event.get("eventId"), "type": kind, **{name: values[name] for name in sub.fields}}


def notice_shaped(sub: Subscription, notice: SubscriptionNotice) -> dict | None:
    """A notice as the subscription may see it: a replayed relation event shaped as the log's, or an account's
    deletion."""
    if notice.event is not None:
        return shaped(sub, notice.event)
    return {"eventId": str(notice.event_id), "type": notice.type, **_user(sub, notice.user_id),
            "deletedAt": iso_utc(notice.at)}


def subscription_read(sub: Subscription, *, cursor: str | None, limit: int) -> Page:
    """Up to `limit` events after the cursor (or after what the subscription acknowledged): its notices first
    (an account's deletion), then the log's events, about oldest first across partitions, each partition in its log
    order. At least once: a page read again serves the same events."""
    at = cursor_decode(sub, cursor) if cursor else Position(acked_positions(sub), sub.notices_acked)
    notices = list(SubscriptionNotice.objects.filter(subscription=sub, id__gt=at.notices).order_by("id")[:limit])
    events = [e for e in (notice_shaped(sub, n) for n in notices) if e is not None]
    positions, room = dict(at.partitions), limit - len(notices)
    read = _read_around(positions, room + 1) if room else {}
    entries = sorted((e for batch in read.values() for e in batch), key=lambda e: (*e.sort_key, e.partition))
    page, rest = entries[:room], entries[room:]
    for entry in page:
        positions[entry.partition] = entry.entry_id
        event = shaped(sub, entry.event) if isinstance(entry.event, dict) else None
        if event is not None:
            events.append(event)
    if rest:
        lag = max(0.0, time.time() - rest[0].sort_key[0] / 1000)
    else:  # nothing read beyond this page; when notices filled it, the log was not read at all
        lag = 0.0 if room else lag_seconds(positions)
    next_at = Position(positions, notices[-1].id if notices else at.notices)
    return Page(events, cursor_encode(sub, next_at), round(lag, 3))


def _read_around(positions: dict[int, str], want: int) -> dict[int, list]:
    """About `want` entries after `positions`, spread over the partitions: a fair share of each first, then more of
    those that had more, until `want` are read or every partition is exhausted (reads stay near `want`, not
    `want` per partition). Each partition's list is a prefix of what follows its position."""
    read: dict[int, list] = {p: [] for p in positions}
    open_ = set(positions)
    while open_ and sum(len(b) for b in read.values()) < want:
        quota = max(1, -(-(want - sum(len(b) for b in read.values())) // len(open_)))
        for p in sorted(open_):
            after = read[p][-1].entry_id if read[p] else positions[p]
            batch = streams.read_after(p, after, quota)
            read[p] += batch
            if len(batch) < quota:
                open_.discard(p)
    return read


def subscription_report(sub: Subscription) -> dict:
    """What `subscription_show --json` prints (never the token, never its hash or key)."""
    positions = acked_positions(sub)
    return {"name": sub.name, "owner": sub.owner, "purpose": sub.purpose, "fields": sub.fields,
            "from": sub.start_from, "status": sub.status, "statusReason": sub.status_reason,
            "maxLagSeconds": sub.max_lag_s, "position": {str(p): i for p, i in sorted(positions.items())},
            "lagSeconds": round(lag_seconds(positions), 3) if sub.status in ("ACTIVE", "PAUSED") else None,
            "lastAckAt": sub.last_ack_at, "createdBy": sub.created_by, "createdAt": sub.created_at}
