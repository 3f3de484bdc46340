"""What the count and reverse-index projectors hold about one relation event, for the console's trace
(OPS-2, OBS-1). Never writes and never opens a transaction.

Both projectors write a receipt per stream position they consumed, on the count partition that holds the
rows the event changed, in the same transaction as those rows: the count projector on the partition its
virtual bucket routes to (`CountEventReceipt`, indexed by event id), the reverse index on the partition of
the user's reverse shard (`ReverseEventReceipt`, keyed by stream position). Rows written by a rebuild or a
restore have no receipt; the projected row's version is then the evidence (a version not below the
event's covers it)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings

from counting import routing
from counting.models import CountEventReceipt, LikeCountProjection, LikeReverseProjection, ReverseEventReceipt
from likes_project.errors import InvalidInput, NotFound
from likes_project.eventlog.streams import TOPIC

RECEIPT_MODELS = {"count": CountEventReceipt, "reverse": ReverseEventReceipt}


@dataclass(frozen=True)
class Receipt:
    consumer: str  # count | reverse
    store: str  # the count partition alias it lives on
    id: int
    generation: int
    source_partition: int
    source_offset: str  # the stream entry id
    event_id: str
    outcome: str  # applied | stale | duplicate
    created_at: dt.datetime


@dataclass(frozen=True)
class ProjectedRow:
    """The version and state a projection has seen for the relation."""

    table: str
    state: str
    version: int
    updated_at: dt.datetime


@dataclass(frozen=True)
class ProjectorEvidence:
    store: str
    generation: int
    receipt: Receipt | None
    row: ProjectedRow | None


def _receipt(consumer: str, store: str, row) -> Receipt:
    return Receipt(consumer=consumer, store=store, id=row.id, generation=row.generation,
                   source_partition=row.source_partition, source_offset=row.source_offset, event_id=row.event_id,
                   outcome=row.outcome, created_at=row.created_at)


def count_evidence_get(*, user_id: int, video_id: str, event_id: str, stream_partition: int,
                       entry_id: str) -> ProjectorEvidence:
    """The active generation's receipt of the event (by event id, else by stream position) and its
    projection row of (user, video), on the count partition the relation's virtual bucket routes to."""
    gen = routing.active()
    store = gen.routes[routing.virtual_bucket(gen.space, video_id, user_id)].partition
    receipts = CountEventReceipt.objects.using(store).filter(generation=gen.generation)
    found = receipts.filter(event_id=event_id).order_by("-id").first() if event_id else None
    if found is None and entry_id:
        found = receipts.filter(source_topic=TOPIC, source_partition=stream_partition,
                                source_offset=entry_id).first()
    row = (LikeCountProjection.objects.using(store).filter(generation=gen.generation, user_id=user_id,
                                                           video_id=video_id).first())
    return ProjectorEvidence(
        store=store, generation=gen.generation, receipt=_receipt("count", store, found) if found else None,
        row=ProjectedRow("count projection", row.projected_state, row.projected_version, row.updated_at)
        if row else None)


def reverse_evidence_get(*, user_id: int, video_id: str, stream_partition: int, entry_id: str) -> ProjectorEvidence:
    """The active reverse-index generation's receipt of the stream position and its state row of
    (video, user), on the count partition that holds the user's reverse shard."""
    gen = routing.reverse_active()
    store = gen.alias_of(user_id)
    found = (ReverseEventReceipt.objects.using(store).filter(
        generation=gen.generation, source_topic=TOPIC, source_partition=stream_partition,
        source_offset=entry_id).first() if entry_id else None)
    row = LikeReverseProjection.objects.using(store).filter(generation=gen.generation, video_id=video_id,
                                                            user_id=user_id).first()
    return ProjectorEvidence(
        store=store, generation=gen.generation, receipt=_receipt("reverse", store, found) if found else None,
        row=ProjectedRow("reverse index", row.state, row.relation_version, row.updated_at) if row else None)


def notify_evidence_get(*, user_id: int, video_id: str) -> ProjectorEvidence:
    """The version of (user, video) the notifications consumer applied (it keeps no per-event receipt; its rows are
    on `default`)."""
    from counting.notifications.models import NotifyRelation

    row = NotifyRelation.objects.filter(video_id=video_id, user_id=user_id).order_by("-relation_version").first()
    projected = None if row is None else ProjectedRow(table=NotifyRelation._meta.db_table, state=row.state,
                                                      version=row.relation_version, updated_at=row.updated_at)
    return ProjectorEvidence(store="default", generation=0, receipt=None, row=projected)


def receipt_get(*, consumer: str, store: str, receipt_id: int) -> Receipt:
    """One receipt of the count or reverse projector by its id on count partition `store`."""
    model = RECEIPT_MODELS.get(consumer)
    if model is None:
        raise InvalidInput(f"consumer must be one of {sorted(RECEIPT_MODELS)}.", code="invalid_consumer")
    if store not in settings.COUNT_PARTITION_ALIASES:
        raise InvalidInput(f"store must be one of {list(settings.COUNT_PARTITION_ALIASES)}.", code="invalid_store")
    row = model.objects.using(store).filter(pk=receipt_id).first()
    if row is None:
        raise NotFound(f"No {consumer} receipt {receipt_id} on {store}.", code="receipt_not_found")
    return _receipt(consumer, store, row)
