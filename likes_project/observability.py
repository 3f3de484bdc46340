"""The store gauges of /metrics (issue 3 §5), computed by a beat job and read by scrapes (issue 10 §3,
D46).

Computing them reads every store: a GROUP BY over each relation shard's outbox, up to 10,001 stream
entries per consumer and partition, the dead letters, the dirty marks of every count partition. That
work runs in the periodic task `observability.refresh_gauges` (`gauges_refresh`), which stores the
result in one `GaugeSnapshot` row on `default`; a scrape (`scrape_families`) only reads that row, so
its cost does not grow with outbox rows or stream entries and it never touches Redis. The scrape also
exports the row's age (`likes_metrics_gauges_age_seconds`): a refresh that stops running shows there.

Age gauges ("how old is the oldest pending thing") are stored as the epoch time of that thing and
turned into an age at scrape time, so they keep growing while refreshes are stalled (then they are an
upper bound: the thing may have been handled since). Counts are as of the refresh.

The core reads the event log's gauges itself (streams, consumer lag, dead letters) and the generation
lifecycle's rebuild progress (every generation table's building row); each app registers the parts that
read its own stores (`register_part`, from its AppConfig.ready), so this module never imports an app.
Each part reads one store. A part whose store fails is left out of the snapshot and reported as
`likes_metrics_scrape_errors{part="..."} 1` instead: a refresh never fails because a shard, a count
partition or Redis is down (that is exactly when the other gauges matter).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.apps import apps
from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.db.models import Count, Min
from django.utils import timezone
from redis.exceptions import RedisError

from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter, DeadLetterStatus, GaugeSnapshot
from likes_project.generations.models import BUILDING, GenerationModel
from likes_project.redis_client import stream_redis

logger = logging.getLogger(__name__)

# Counting the entries after a checkpoint means reading them; past this many the gauge saturates.
LAG_ENTRIES_CAP = 10_000
SNAPSHOT_KEY = "gauges"
# The part name a scrape reports when it cannot read the stored snapshot (none yet, or `default` down).
SNAPSHOT_PART = "gauge_snapshot"

Labels = dict[str, str]
GaugeFamily = tuple[str, str, list[tuple[Labels, float]]]  # what `likes_project.metrics.render` takes


@dataclass
class Family:
    name: str
    help: str
    # A `since` family holds epoch times (None: nothing pending); a scrape exports now - time, or 0.
    since: bool = False
    samples: list[tuple[Labels, float | None]] = field(default_factory=list)

    def add(self, val: float, **labels: str) -> None:
        self.samples.append((labels, val))

    def add_since(self, at: dt.datetime | float | None, **labels: str) -> None:
        """The oldest pending thing happened at `at` (a datetime or epoch seconds; None: nothing)."""
        self.since = True
        self.samples.append((labels, at.timestamp() if isinstance(at, dt.datetime) else at))


@dataclass
class Scrape:
    families: dict[str, Family] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def family(self, name: str, help_text: str) -> Family:
        return self.families.setdefault(name, Family(name, help_text))


def age_seconds(oldest, now) -> float:
    return max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0


# --- parts: each adds samples to a Scrape it is given only once all its reads have succeeded ----


def _streams(scrape: Scrape) -> None:
    partitions = streams.all_partitions()
    pipe = stream_redis().pipeline(transaction=False)
    for p in partitions:
        pipe.xlen(streams.stream_key(p))
    lengths = pipe.execute()
    family = scrape.family("likes_stream_length", "Entries held in each event-log stream partition.")
    for p, n in zip(partitions, lengths, strict=True):
        family.add(int(n), partition=str(p))


def _lag_after(partition: int, last_done_id: str) -> tuple[int, float | None]:
    """(entries after the checkpoint, capped; epoch seconds of the first of them, None if none)."""
    client = stream_redis()
    key = streams.stream_key(partition)
    head = client.xrange(key, min="-", max="+", count=1)
    if not head:
        return 0, None
    head_id = head[0][0].decode()
    if streams.entry_id_key(last_done_id) < streams.entry_id_key(head_id):
        # Every entry still held is after the checkpoint: XLEN is exact and cheap.
        first_ms, entries = streams.entry_id_key(head_id)[0], int(client.xlen(key))
    else:
        rows = client.xrange(key, min=f"({last_done_id}", max="+", count=LAG_ENTRIES_CAP + 1)
        if not rows:
            return 0, None
        first_ms, entries = streams.entry_id_key(rows[0][0].decode())[0], len(rows)
    return min(entries, LAG_ENTRIES_CAP), first_ms / 1000


def _consumer_lag(scrape: Scrape) -> None:
    partitions = streams.all_partitions()
    done = {(c, p): last for c, p, last in ConsumerCheckpoint.objects.values_list("consumer", "partition",
                                                                                  "last_done_id")}
    # A known consumer without a checkpoint on some partition has not started there: it lags by all of it.
    positions = {(c, p): done.get((c, p), "0-0") for c in sorted({c for c, _ in done}) for p in partitions}
    positions.update(done)
    lags = {key: _lag_after(key[1], last) for key, last in sorted(positions.items())}
    entries = scrape.family("likes_consumer_lag_entries",
                            f"Stream entries after a consumer's checkpoint (saturates at {LAG_ENTRIES_CAP}).")
    seconds = scrape.family("likes_consumer_lag_seconds",
                            "Age of the oldest stream entry after a consumer's checkpoint (0 when caught up).")
    for (consumer, partition), (n, first_at) in lags.items():
        entries.add(n, consumer=consumer, partition=str(partition))
        seconds.add_since(first_at, consumer=consumer, partition=str(partition))
    window = scrape.family("likes_convergence_window_seconds",
                           "How old an event a chain's consumer has not applied may be (OBS-3; the alert's bound).")
    for consumer, bound in sorted(settings.CONVERGENCE_WINDOW_S.items()):
        window.add(bound, consumer=consumer)


def _dead_letters(scrape: Scrape) -> None:
    counts = list(DeadLetter.objects.order_by().values_list("consumer", "status").annotate(n=Count("id")))
    oldest = (DeadLetter.objects.filter(status=DeadLetterStatus.NEW)
              .aggregate(oldest=Min("first_failed_at"))["oldest"])
    family = scrape.family("likes_dead_letters", "Dead letters by consumer and status.")  # M9
    for consumer, status, n in sorted(counts):
        family.add(n, consumer=consumer, status=status)
    scrape.family("likes_dead_letter_oldest_age_seconds", "Age of the oldest NEW dead letter (0 when none)."
                  ).add_since(oldest)


def _generation_rebuilds(scrape: Scrape) -> None:
    """M15: generation rebuild progress, per generation table (one per lifecycle: a handful), as the building
    generation's last chunk saved it: whether one is building, and each begun step's units done and, when the step
    knows it, its total (`done / expected` is the progress)."""
    building = scrape.family("likes_generation_rebuilding", "1 while a generation of this table is being built.")
    done = scrape.family("likes_generation_rebuild_units_done", "Units the building generation's step has done.")
    expected = scrape.family("likes_generation_rebuild_units_expected",
                             "Units the building generation's step expects in all (when it knows).")
    for model in sorted((m for m in apps.get_models() if issubclass(m, GenerationModel)),
                        key=lambda m: m._meta.label_lower):
        name = model._meta.label_lower
        row = model.objects.filter(status__in=BUILDING).first()
        building.add(0.0 if row is None else 1.0, model=name)
        for step, counts in ((row.progress or {}).get("steps", {}) if row else {}).items():
            done.add(int(counts.get("done") or 0), model=name, step=step)
            if counts.get("total") is not None:
                expected.add(counts["total"], model=name, step=step)


_PARTS: list[tuple[str, Callable[[Scrape], None]]] = []


def register_part(name: str, part: Callable[[Scrape], None]) -> None:
    """Add a gauge part (an app's AppConfig.ready does, for its own stores); a name is registered once."""
    if name not in {n for n, _p in _PARTS}:
        _PARTS.append((name, part))


def collect() -> Scrape:
    """Run every part against its store (the expensive reads; only `gauges_refresh` calls this)."""
    scrape = Scrape()
    parts = [("streams", _streams), ("consumer_lag", _consumer_lag), ("dead_letters", _dead_letters),
             ("generation_rebuilds", _generation_rebuilds), *_PARTS]
    redis_down = False
    for name, part in parts:
        if redis_down and name == "consumer_lag":
            # Redis already failed this run; do not wait for its timeout a second time.
            scrape.errors.append(name)
            continue
        staged = Scrape()
        try:
            part(staged)
        except Exception as exc:  # any failing store becomes a scrape error line, never a failed run
            logger.warning("metrics part %s failed: %s", name, exc.__class__.__name__, exc_info=True)
            scrape.errors.append(name)
            redis_down = redis_down or isinstance(exc, RedisError)
            continue
        for family in staged.families.values():
            merged = scrape.family(family.name, family.help)
            merged.since = merged.since or family.since
            merged.samples.extend(family.samples)
    return scrape


# --- the stored snapshot --------------------------------------------------------------------------


@dataclass
class GaugeRefreshReport:
    families: int = 0
    samples: int = 0
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    stored: bool = False  # False: a run that started later had already stored its snapshot


_STORE_SQL = f"""
INSERT INTO {GaugeSnapshot._meta.db_table} AS g (key, computed_at, duration_s, families, errors)
VALUES (%s, %s, %s, %s::jsonb, %s::jsonb)
ON CONFLICT (key) DO UPDATE SET computed_at = EXCLUDED.computed_at, duration_s = EXCLUDED.duration_s,
       families = EXCLUDED.families, errors = EXCLUDED.errors
 WHERE g.computed_at < EXCLUDED.computed_at
"""


def gauges_refresh() -> GaugeRefreshReport:
    """Compute every gauge part and store the result as the one GaugeSnapshot row (the beat job
    `observability.refresh_gauges`, every METRICS_GAUGES_EVERY_S).

    Transaction: the reads run outside any transaction, each on its own store; then one statement on
    `default` replaces the row.
    Idempotency: runs may overlap; a run's snapshot is stamped with the time it started and only
    replaces an older one, so the stored snapshot never goes back in time.
    """
    started_at = timezone.now()
    started = time.monotonic()
    scrape = collect()
    duration = time.monotonic() - started
    families = [{"name": f.name, "help": f.help, "since": f.since, "samples": [[labels, v] for labels, v in f.samples]}
                for f in scrape.families.values()]
    with transaction.atomic(using="default", durable=True), connections["default"].cursor() as cursor:
        cursor.execute(_STORE_SQL, [SNAPSHOT_KEY, started_at, duration, json.dumps(families),
                                    json.dumps(scrape.errors)])
        stored = cursor.rowcount == 1
    return GaugeRefreshReport(families=len(families), samples=sum(len(f["samples"]) for f in families),
                              errors=list(scrape.errors), duration_s=round(duration, 3), stored=stored)


def scrape_families(now: dt.datetime | None = None) -> list[GaugeFamily]:
    """The stored gauges as a scrape exports them: one read of one row on `default`, no Redis.
    Never raises: a snapshot that cannot be read is a scrape error of its own (`gauge_snapshot`)."""
    try:
        row = GaugeSnapshot.objects.filter(key=SNAPSHOT_KEY).first()
    except DatabaseError as exc:
        logger.warning("gauge snapshot unreadable: %s", exc.__class__.__name__)
        row = None
    if row is None:
        return [_errors_family([SNAPSHOT_PART])]
    now = now or timezone.now()
    now_s = now.timestamp()
    out: list[GaugeFamily] = []
    for family in row.families:
        samples = [(labels, round(max(0.0, now_s - v), 3) if v is not None else 0.0) if family["since"]
                   else (labels, v) for labels, v in family["samples"]]
        out.append((family["name"], family["help"], samples))
    out.append(("likes_metrics_gauges_age_seconds",
                "Seconds since the stored gauges were computed (observability.refresh_gauges).",
                [({}, round(age_seconds(row.computed_at, now), 3))]))
    out.append(("likes_metrics_gauges_refresh_duration_seconds",
                "How long the last stored gauge refresh took.", [({}, row.duration_s)]))
    if row.errors:
        out.append(_errors_family(row.errors))
    return out


def _errors_family(parts: list[str]) -> GaugeFamily:
    return ("likes_metrics_scrape_errors", "A gauge family left out of the stored gauges: its store failed.",
            [({"part": part}, 1.0) for part in parts])
