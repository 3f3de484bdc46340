"""Gauges computed at scrape time (issue 3 §5), rendered in Prometheus text format after the
in-process counters of `likes_project.metrics`.

The core reads the event log's gauges itself (streams, consumer lag, dead letters); each app registers
the parts that read its own stores (`register_part`, from its AppConfig.ready), so this module never
imports an app. Each part reads one store. A part whose store fails is left out and reported as
`likes_metrics_scrape_errors{part="..."} 1` instead: a scrape never fails because a shard, a count
partition or Redis is down (that is exactly when the other gauges matter). Reads only; nothing
here writes or opens a transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db.models import Count, Min
from django.utils import timezone
from redis.exceptions import RedisError

from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter, DeadLetterStatus
from likes_project.redis_client import stream_redis

logger = logging.getLogger(__name__)

# Counting the entries after a checkpoint means reading them; past this many the gauge saturates.
LAG_ENTRIES_CAP = 10_000


@dataclass
class Family:
    name: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, val: float, **labels: str) -> None:
        self.samples.append((labels, val))


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


def _lag_after(partition: int, last_done_id: str) -> tuple[int, float]:
    """(entries after the checkpoint, capped; seconds since the first of them was added, 0 if none)."""
    client = stream_redis()
    key = streams.stream_key(partition)
    head = client.xrange(key, min="-", max="+", count=1)
    if not head:
        return 0, 0.0
    head_id = head[0][0].decode()
    if streams.entry_id_key(last_done_id) < streams.entry_id_key(head_id):
        # Every entry still held is after the checkpoint: XLEN is exact and cheap.
        first_ms, entries = streams.entry_id_key(head_id)[0], int(client.xlen(key))
    else:
        rows = client.xrange(key, min=f"({last_done_id}", max="+", count=LAG_ENTRIES_CAP + 1)
        if not rows:
            return 0, 0.0
        first_ms, entries = streams.entry_id_key(rows[0][0].decode())[0], len(rows)
    return min(entries, LAG_ENTRIES_CAP), max(0.0, time.time() - first_ms / 1000)


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
    for (consumer, partition), (n, age) in lags.items():
        entries.add(n, consumer=consumer, partition=str(partition))
        seconds.add(round(age, 3), consumer=consumer, partition=str(partition))


def _dead_letters(scrape: Scrape) -> None:
    counts = list(DeadLetter.objects.order_by().values_list("consumer", "status").annotate(n=Count("id")))
    oldest = (DeadLetter.objects.filter(status=DeadLetterStatus.NEW)
              .aggregate(oldest=Min("first_failed_at"))["oldest"])
    family = scrape.family("likes_dead_letters", "Dead letters by consumer and status.")
    for consumer, status, n in sorted(counts):
        family.add(n, consumer=consumer, status=status)
    scrape.family("likes_dead_letter_oldest_age_seconds",
                  "Age of the oldest NEW dead letter (0 when none).").add(age_seconds(oldest, timezone.now()))


_PARTS: list[tuple[str, Callable[[Scrape], None]]] = []


def register_part(name: str, part: Callable[[Scrape], None]) -> None:
    """Add a gauge part (an app's AppConfig.ready does, for its own stores); a name is registered once."""
    if name not in {n for n, _p in _PARTS}:
        _PARTS.append((name, part))


def collect() -> Scrape:
    scrape = Scrape()
    parts = [("streams", _streams), ("consumer_lag", _consumer_lag), ("dead_letters", _dead_letters), *_PARTS]
    redis_down = False
    for name, part in parts:
        if redis_down and name == "consumer_lag":
            # Redis already failed this scrape; do not wait for its timeout a second time.
            scrape.errors.append(name)
            continue
        staged = Scrape()
        try:
            part(staged)
        except Exception as exc:  # any failing store becomes a scrape error line, never a 500
            logger.warning("metrics part %s failed: %s", name, exc.__class__.__name__, exc_info=True)
            scrape.errors.append(name)
            redis_down = redis_down or isinstance(exc, RedisError)
            continue
        for family in staged.families.values():
            scrape.family(family.name, family.help).samples.extend(family.samples)
    return scrape


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(name: str, labels: dict[str, str], val: float) -> str:
    num = int(val) if float(val).is_integer() else val
    if not labels:
        return f"{name} {num}"
    label_txt = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return f"{name}{{{label_txt}}} {num}"


def render(scrape: Scrape | None = None) -> str:
    scrape = scrape or collect()
    lines = []
    for family in scrape.families.values():
        lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} gauge"]
        lines += [_sample(family.name, labels, val) for labels, val in family.samples]
    if scrape.errors:
        lines += ["# HELP likes_metrics_scrape_errors A gauge family left out of this scrape: its store failed.",
                  "# TYPE likes_metrics_scrape_errors gauge"]
        lines += [_sample("likes_metrics_scrape_errors", {"part": part}, 1) for part in scrape.errors]
    return "\n".join(lines) + "\n"
