"""Writes of subscriptions (issue 31 §1): create, pause, resume, retire, acknowledge, and the lag check that
lets a subscription fall out of the log's bookkeeping. Each is one transaction on `default` with its audit
record; the subscription's position lives in the event log's checkpoint rows (`sub:<name>`)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from likes_project import metrics
from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.errors import Conflict, DomainError, Forbidden, InvalidInput, NotFound
from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint
from likes_project.subscriptions.models import Subscription, SubscriptionNotice, SubscriptionStatus

logger = logging.getLogger(__name__)

PERMISSION = "subscriptions.manage_subscription"
LAG_CHECKER = "subscription-lag-check"
NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,62}")
# The event fields a subscription may be granted (PRIV-1); `eventId` and `type` are always sent. A user is
# named by id or by the subscription's own pseudonym, never both.
FIELDS = ("userId", "userPseudonym", "videoId", "state", "relationVersion", "stateChangedAt", "device")
S = SubscriptionStatus


class SubscriptionNotFound(NotFound):
    code = "subscription_not_found"
    default_message = "No such subscription."


class TokenInvalid(DomainError):
    code = "authentication_failed"
    http_status = 401
    default_message = "Invalid token."


# The other refusals are Conflict (409) or Forbidden (403) with their codes (`DomainError(..., code=)`).
PAUSED = ("The subscription is paused by an operator; it keeps its position.", "subscription_paused")
BEHIND = ("The subscription fell further behind than its retention allows; an operator replays it from the outbox "
          "archive.", "behind_retention")
REPLAYING = ("The subscription is being replayed from the outbox archive; read again when the replay is done.",
             "subscription_replaying")


@dataclass(frozen=True)
class Created:
    subscription: Subscription
    token: str  # shown once, never stored


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def pseudonym(subscription: Subscription, user_id: int) -> str:
    """The subscription's own stable name for a user: HMAC-SHA256 under its key (another subscription's differs)."""
    return hmac.new(bytes.fromhex(subscription.pseudonym_key), str(user_id).encode(), hashlib.sha256).hexdigest()[:32]


def device_pseudonym(subscription: Subscription, device_id: str) -> str:
    """The subscription's own stable name for a device (never the client's device id itself, SEC-6): HMAC-SHA256
    under its key, in a namespace apart from its user pseudonyms."""
    key = bytes.fromhex(subscription.pseudonym_key)
    return hmac.new(key, f"device:{device_id}".encode(), hashlib.sha256).hexdigest()[:32]


def _fields_clean(fields) -> list[str]:
    if not isinstance(fields, list) or not fields or not all(isinstance(f, str) for f in fields):
        raise InvalidInput(f"Give the fields it may receive, some of {', '.join(FIELDS)}.", code="invalid_fields")
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise InvalidInput(f"Unknown fields {', '.join(unknown)}; known: {', '.join(FIELDS)}.", code="invalid_fields")
    if {"userId", "userPseudonym"} <= set(fields):
        raise InvalidInput("Either userId or userPseudonym, not both.", code="invalid_fields")
    return [f for f in FIELDS if f in fields]


def _text(value, *, field: str, limit: int) -> str:
    value = (value or "").strip() if isinstance(value, str) else ""
    if not value or len(value) > limit or "\x00" in value:
        raise InvalidInput(f"{field} is required, at most {limit} characters.", code=f"invalid_{field}")
    return value


def _start_positions(start_from: str) -> dict[int, str]:
    """Per partition, the position just before what it reads first: the log's last id (latest), or just before
    its oldest held entry (earliest; "0-0" for an empty stream)."""
    if start_from == "latest":
        return {p: streams.last_generated_id(p) for p in streams.all_partitions()}
    out = {}
    for p in streams.all_partitions():
        first = streams.read_after(p, "0-0", 1)
        out[p] = "0-0" if not first else "{}-{}".format(*streams.entry_just_below(first[0].sort_key))
    return out


def subscription_create(*, name: str, owner: str, purpose: str, fields, start_from: str, actor: Actor,
                        alert_lag_s: float | None = None) -> Created:
    """A new ACTIVE subscription reading from `start_from`, with a fresh token (returned once; only its hash is
    stored). Its checkpoint rows are written in the same transaction, so from its commit on the log holds back
    for it. Transaction: one on `default` (row, checkpoints, audit)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidInput("The name is 1-63 of [a-z0-9-], starting with a letter.", code="invalid_name")
    owner, purpose = _text(owner, field="owner", limit=150), _text(purpose, field="purpose", limit=2000)
    fields = _fields_clean(fields)
    if start_from not in ("earliest", "latest"):
        raise InvalidInput("--from is earliest or latest.", code="invalid_start")
    token = secrets.token_urlsafe(32)
    positions = _start_positions(start_from)
    try:
        with transaction.atomic(using="default", durable=True):
            sub = Subscription.objects.create(
                name=name, owner=owner, purpose=purpose, fields=fields, start_from=start_from,
                max_lag_s=settings.SUBSCRIPTION_MAX_LAG_S, token_hash=token_hash(token),
                alert_lag_s=settings.SUBSCRIPTION_ALERT_LAG_S if alert_lag_s is None else alert_lag_s,
                pseudonym_key=secrets.token_hex(32), created_by=actor.name)
            ConsumerCheckpoint.objects.bulk_create([ConsumerCheckpoint(consumer=sub.consumer, partition=p,
                                                                       last_done_id=pos)
                                                    for p, pos in positions.items()])
            audit_record(actor=actor, action="subscription.create", target_type="subscription", target_id=name,
                         params={"owner": owner, "purpose": purpose, "fields": fields, "from": start_from})
    except IntegrityError:
        raise Conflict(f"A subscription named {name!r} exists already.", code="subscription_exists") from None
    return Created(sub, token)


def subscription_get(name: str) -> Subscription:
    sub = Subscription.objects.filter(name=name).first() if isinstance(name, str) else None
    if sub is None:
        raise SubscriptionNotFound(f"No subscription named {name!r}.")
    return sub


# What an operator may do from each state (a BEHIND_RETENTION one is replayed, never simply resumed).
_MOVES = {
    "pause": ({S.ACTIVE}, S.PAUSED),
    "resume": ({S.PAUSED}, S.ACTIVE),
    "retire": ({S.ACTIVE, S.PAUSED, S.BEHIND_RETENTION}, S.RETIRED),
}


def subscription_move(*, name: str, move: str, actor: Actor, reason: str = "") -> Subscription:
    """pause, resume or retire. Retiring drops its checkpoint rows (the log stops holding back for it) and keeps
    its last position on the row. Transaction: one on `default` (row lock, checkpoints, audit)."""
    allowed, to = _MOVES[move]
    with transaction.atomic(using="default", durable=True):
        sub = Subscription.objects.select_for_update().filter(pk=subscription_get(name).pk).get()
        if sub.status not in allowed:
            raise Conflict(f"Subscription {name} is {sub.status}; it cannot {move}.", code="subscription_state")
        if to == S.RETIRED:
            sub.position = {**sub.position, **_checkpoints_drop(sub)}
        sub.status, sub.status_reason, sub.status_changed_at = to, reason.strip()[:2000], timezone.now()
        sub.save(update_fields=["status", "status_reason", "status_changed_at", "position"])
        audit_record(actor=actor, action=f"subscription.{move}", target_type="subscription", target_id=name,
                     params={"reason": sub.status_reason, "to": to})
    return sub


def _checkpoints_drop(sub: Subscription) -> dict[str, str]:
    rows = ConsumerCheckpoint.objects.filter(consumer=sub.consumer)
    position = {str(p): last for p, last in rows.values_list("partition", "last_done_id")}
    rows.delete()
    return position


def subscription_authorize(*, name: str, token: str | None) -> Subscription:
    """The subscription `token` opens, if it is `name`'s: else 401 (a token no live subscription has) or 403
    (another subscription's token). Neither answer says whether `name` exists."""
    sub = Subscription.objects.filter(token_hash=token_hash(token)).first() if token else None
    if sub is None or sub.status == S.RETIRED:
        raise TokenInvalid()
    if not hmac.compare_digest(sub.name.encode(), str(name).encode()):
        raise Forbidden("This token is not for that subscription.", code="subscription_forbidden")
    return sub


def subscription_readable(sub: Subscription) -> None:
    refusal = {S.PAUSED: PAUSED, S.BEHIND_RETENTION: BEHIND, S.REPLAYING: REPLAYING}.get(sub.status)
    if refusal is not None:
        raise Conflict(refusal[0], code=refusal[1])


def subscription_ack(*, sub: Subscription, positions: dict[int, str], notices: int = 0) -> Subscription:
    """Record that the subscription processed everything up to `positions` and its notices up to `notices` (from
    a cursor the service issued). Both only move forward; from the commit on, trimming and archiving may pass the
    positions, and the acknowledged notices are dropped."""
    with transaction.atomic(using="default", durable=True):
        sub = Subscription.objects.select_for_update().get(pk=sub.pk)
        subscription_readable(sub)
        rows = {r.partition: r for r in ConsumerCheckpoint.objects.select_for_update().filter(consumer=sub.consumer)}
        for partition, last in positions.items():
            row = rows.get(partition)
            if row is not None and streams.entry_id_key(last) > streams.entry_id_key(row.last_done_id):
                row.last_done_id = last
                row.save(update_fields=["last_done_id", "updated_at"])
        if notices > sub.notices_acked:
            sub.notices_acked = notices
            SubscriptionNotice.objects.filter(subscription=sub, id__lte=notices).delete()
        sub.last_ack_at = timezone.now()
        sub.save(update_fields=["last_ack_at", "notices_acked"])
    return sub


ACCOUNT_DELETED = "account.deleted"


def subscriptions_notify_account_deleted(*, user_id: int) -> int:
    """An `account.deleted` notice for every live subscription that receives users (by id or pseudonym), so
    each downstream erases what it holds of the user (PRIV-4). Must run inside the deletion's transaction on
    `default`: the notices exist exactly when the deletion does. Returns how many were written."""
    if not transaction.get_connection("default").in_atomic_block:
        raise RuntimeError("account.deleted notices are written in the deletion's transaction")
    now = timezone.now()
    subs = [sub for sub in Subscription.objects.exclude(status=S.RETIRED)
            if {"userId", "userPseudonym"} & set(sub.fields)]
    SubscriptionNotice.objects.bulk_create([SubscriptionNotice(subscription=sub, event_id=uuid.uuid4(),
                                                               type=ACCOUNT_DELETED, user_id=user_id, at=now)
                                            for sub in subs])
    return len(subs)


def acked_positions(sub: Subscription) -> dict[int, str]:
    """Per partition, what it acknowledged: its checkpoint rows, else the position kept on the row."""
    rows = dict(ConsumerCheckpoint.objects.filter(consumer=sub.consumer).values_list("partition", "last_done_id"))
    kept = {int(p): last for p, last in (sub.position or {}).items()}
    return {p: rows.get(p, kept.get(p, "0-0")) for p in streams.all_partitions()}


def lag_seconds(positions: dict[int, str], *, now_s: float | None = None) -> float:
    """How old the oldest entry after `positions` is (0 when nothing is left to read)."""
    oldest = None
    for partition, last in positions.items():
        first = streams.read_after(partition, last, 1)
        if first:
            ms = first[0].sort_key[0]
            oldest = ms if oldest is None else min(oldest, ms)
    if oldest is None:
        return 0.0
    return max(0.0, (now_s if now_s is not None else time.time()) - oldest / 1000)


@dataclass(frozen=True)
class LagReport:
    alerts: list[str]  # lagging past their alert threshold
    behind: list[str]  # moved to BEHIND_RETENTION by this check


def subscriptions_lag_check() -> LagReport:
    """Every ACTIVE or PAUSED subscription's lag. Past its `alert_lag_s` an ALERT is logged and counted
    (`likes_subscription_lag_alerts_total`); past its `max_lag_s` it turns BEHIND_RETENTION: its checkpoint rows
    go (trimming and archiving no longer wait for it), its position stays on the row, and an alert is logged and
    counted (`likes_subscription_behind_retention_total`)."""
    report = LagReport([], [])
    for sub in Subscription.objects.filter(status__in=[S.ACTIVE, S.PAUSED]):
        lag = lag_seconds(acked_positions(sub))
        if lag > sub.alert_lag_s:
            metrics.inc("likes_subscription_lag_alerts_total", subscription=sub.name)
            logger.warning("ALERT subscription %s lags %.0f s (alert past %.0f s, behind retention past %.0f s)",
                           sub.name, lag, sub.alert_lag_s, sub.max_lag_s)
            report.alerts.append(sub.name)
        if lag <= sub.max_lag_s:
            continue
        with transaction.atomic(using="default", durable=True):
            locked = Subscription.objects.select_for_update().get(pk=sub.pk)
            if locked.status not in (S.ACTIVE, S.PAUSED):
                continue
            locked.position = {**locked.position, **_checkpoints_drop(locked)}
            locked.status, locked.status_changed_at = S.BEHIND_RETENTION, timezone.now()
            locked.status_reason = f"lag {lag:.0f} s past its limit of {locked.max_lag_s:.0f} s"
            locked.save(update_fields=["status", "status_reason", "status_changed_at", "position"])
            audit_record(actor=system_actor(LAG_CHECKER), action="subscription.behind_retention",
                         target_type="subscription", target_id=sub.name,
                         params={"lagSeconds": round(lag, 1), "maxLagSeconds": locked.max_lag_s})
        metrics.inc("likes_subscription_behind_retention_total", subscription=sub.name)
        logger.warning("ALERT subscription %s is BEHIND_RETENTION: lag %.0f s > %.0f s; it no longer holds the "
                       "log back and needs a replay from the archive", sub.name, lag, sub.max_lag_s)
        report.behind.append(sub.name)
    return report


