"""What a drill compares and watches: the relation facts against every projection a client reads
(display count, likers list, my-likes, batch-query myState), and the backlog of the pipeline
between them (outbox rows not yet published, stream entries not yet consumed). Reads only."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from django.db import DatabaseError, connections
from django.db.models import Max
from redis.exceptions import RedisError

from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter, Lease
from likes_project.eventlog.registry import CONSUMERS
from likes_project.redis_client import stream_redis
from opsconsole.drills.api import DrillApi
from opsconsole.drills.population import Population
from opsconsole.drills.traffic import LIKED, Ack
from relations import events, routing
from relations.models import LikeRelation, OutboxEvent, OutboxStatus

PENDING = [OutboxStatus.NEW, OutboxStatus.RETRY, OutboxStatus.UNCERTAIN, OutboxStatus.PUBLISHING]
LAG_CAP = 10_000


def connections_refresh() -> None:
    """Drop connections a fault killed (a terminated backend stays broken in Django until closed)."""
    for alias in connections:
        connections[alias].close_if_unusable_or_obsolete()
        if connections[alias].connection is not None and not connections[alias].is_usable():
            connections[alias].close()


# --- facts vs projections ---------------------------------------------------------------------------


@dataclass
class VideoRow:
    video_id: str
    acknowledged: int
    facts: int
    display_count: int | None
    batch_count: int | None
    likers: int | None
    likers_match: bool
    ok: bool
    hidden: int = 0  # liked by accounts whose likes leave the public count (banned, down-weighted, frozen)


@dataclass
class UserRow:
    username: str
    shard: str
    acknowledged: list[str]
    facts: list[str]
    my_likes: list[str] | None
    my_state: list[str] | None
    ok: bool


@dataclass
class Comparison:
    videos: list[VideoRow] = field(default_factory=list)
    users: list[UserRow] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)  # pairs whose fact, outbox or acknowledgement disagree
    errors: list[str] = field(default_factory=list)  # reads that did not answer

    @property
    def ok(self) -> bool:
        return (not self.errors and not self.partial and all(v.ok for v in self.videos)
                and all(u.ok for u in self.users))

    def mismatches(self) -> int:
        return sum(not v.ok for v in self.videos) + sum(not u.ok for u in self.users) + len(self.partial)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "videos": [asdict(v) for v in self.videos], "users": [asdict(u) for u in self.users],
                "partial": self.partial, "errors": self.errors}


def _by_owner(population: Population) -> dict[str, list[int]]:
    """The population's users grouped by the shard the active contract puts them on now (a slot move may
    have moved some since the population was made)."""
    return routing.group_users_by_alias(u.user_id for users in population.by_shard.values() for u in users)


def _facts(population: Population) -> dict[tuple[int, str], tuple[str, int]]:
    out = {}
    for alias, users in _by_owner(population).items():
        rows = (LikeRelation.objects.using(alias)
                .filter(user_id__in=users, video_id__in=population.videos)
                .values_list("user_id", "video_id", "state", "relation_version"))
        out.update({(u, v): (s, ver) for u, v, s, ver in rows})
    return out


def _outbox_versions(population: Population) -> dict[str, int]:
    """aggregate key -> the highest relation version the shard's outbox holds for it."""
    out: dict[str, int] = {}
    # A slot move copies relations and commands, not the outbox: the rows written before it stay on the source
    # and drain there. So every shard's outbox is read for every user.
    keys = [events.aggregate_key(u.user_id, v) for users in population.by_shard.values() for u in users
            for v in population.videos]
    for alias in routing.all_aliases():
        rows = (OutboxEvent.objects.using(alias).filter(aggregate_key__in=keys).values("aggregate_key")
                .annotate(top=Max("relation_version")).values_list("aggregate_key", "top"))
        for key, top in rows:
            out[key] = max(top, out.get(key, top))
    return out


def projections_compare(api: DrillApi, population: Population, expected: dict[tuple[int, str], Ack], *,
                        count_hidden: frozenset[int] = frozenset()) -> Comparison:
    """Per touched video: acknowledged likes vs facts vs displayCount (count endpoint and batch query: the facts
    less the likes of `count_hidden`, the accounts whose likes leave the public count) vs likers; per user:
    acknowledged vs facts vs my-likes vs batch-query myState; per pair: the fact is the last acknowledged answer
    and its outbox holds that version (nothing partial, nothing missing)."""
    connections_refresh()
    out = Comparison()
    try:
        facts = _facts(population)
        outbox = _outbox_versions(population)
    except DatabaseError as exc:
        out.errors.append(f"relation facts unreadable: {exc.__class__.__name__}")
        return out
    for (user_id, video_id), (state, version) in sorted(facts.items()):
        ack = expected.get((user_id, video_id))
        if ack is None or (ack.state, ack.version) != (state, version):
            told = "nothing acknowledged" if ack is None else f"acknowledged {ack.state} v{ack.version}"
            out.partial.append(f"user {user_id} video {video_id}: fact {state} v{version}, {told}")
        top = outbox.get(events.aggregate_key(user_id, video_id), 0)
        if top != version:
            out.partial.append(f"user {user_id} video {video_id}: fact v{version}, outbox up to v{top}")
    for (user_id, video_id), ack in sorted(expected.items()):
        if (user_id, video_id) not in facts and ack.version > 0:
            out.partial.append(f"user {user_id} video {video_id}: acknowledged v{ack.version}, no fact")

    liked_by_video = {v: {u for (u, vid), (s, _) in facts.items() if vid == v and s == LIKED}
                      for v in population.videos}
    acked_by_video = {v: {u for (u, vid), a in expected.items() if vid == v and a.state == LIKED}
                      for v in population.videos}
    batch = api.batch_query(population.author, population.videos)
    batch_counts = ({i["videoId"]: i["displayCount"] for i in batch.body["items"]} if batch.ok else {})
    if not batch.ok:
        out.errors.append(f"batch-query (author) answered {batch.status} {batch.code}")
    for video_id in population.videos:
        count = api.like_count(population.author, video_id)
        if not count.ok:
            out.errors.append(f"like-count {video_id} answered {count.status} {count.code}")
        likers_answer, likers = api.likers(population.author, video_id)
        if not likers_answer.ok:
            out.errors.append(f"likers {video_id} answered {likers_answer.status} {likers_answer.code}")
        facts_n = len(liked_by_video[video_id])
        hidden = len(liked_by_video[video_id] & count_hidden)
        display = count.body["displayCount"] if count.ok else None
        likers_match = likers_answer.ok and sorted(likers) == sorted(liked_by_video[video_id])
        out.videos.append(VideoRow(
            video_id, len(acked_by_video[video_id]), facts_n, display, batch_counts.get(video_id),
            len(likers) if likers_answer.ok else None, likers_match,
            ok=(facts_n == len(acked_by_video[video_id]) and facts_n - hidden == display == batch_counts.get(video_id)
                and likers_match), hidden=hidden,
        ))
    for user in population.users:
        fact_set = sorted(v for (u, v), (s, _) in facts.items() if u == user.user_id and s == LIKED)
        acked = sorted(v for (u, v), a in expected.items() if u == user.user_id and a.state == LIKED)
        mine_answer, mine = api.my_likes(user)
        state_answer = api.batch_query(user, population.videos)
        if not mine_answer.ok:
            out.errors.append(f"my-likes {user.username} answered {mine_answer.status} {mine_answer.code}")
        if not state_answer.ok:
            out.errors.append(f"batch-query {user.username} answered {state_answer.status} {state_answer.code}")
        my_likes = sorted(v for v in mine if v in population.videos) if mine_answer.ok else None
        my_state = (sorted(i["videoId"] for i in state_answer.body["items"] if i["myState"] == LIKED)
                    if state_answer.ok else None)
        out.users.append(UserRow(user.username, user.shard, acked, fact_set, my_likes, my_state,
                                 ok=acked == fact_set == my_likes == my_state))
    return out


# --- the pipeline's backlog -------------------------------------------------------------------------


@dataclass
class Backlog:
    at: float
    outbox_pending: dict[str, int | None]  # shard -> rows not yet published (None: shard unreadable)
    consumer_lag: dict[str, int | None]  # consumer -> stream entries after its checkpoints (all partitions)
    consumer_lag_s: dict[str, float | None]  # consumer -> age of its oldest unconsumed entry
    blocked_attempts: dict[str, int]  # consumer -> most attempts of a head entry still blocked

    @property
    def outbox_total(self) -> int:
        return sum(n or 0 for n in self.outbox_pending.values())


def _lag(partition: int, after: str) -> tuple[int, float]:
    rows = stream_redis().xrange(streams.stream_key(partition), min=f"({after}", max="+", count=LAG_CAP)
    if not rows:
        return 0, 0.0
    first_ms = streams.entry_id_key(rows[0][0].decode())[0]
    return len(rows), max(0.0, time.time() - first_ms / 1000)


def backlog_sample() -> Backlog:
    """One look at the pipeline; a store that does not answer is reported as None, never raised."""
    connections_refresh()
    pending: dict[str, int | None] = {}
    for alias in routing.all_aliases():
        try:
            pending[alias] = OutboxEvent.objects.using(alias).filter(status__in=PENDING).count()
        except DatabaseError:
            pending[alias] = None
    lag: dict[str, int | None] = {}
    lag_s: dict[str, float | None] = {}
    blocked: dict[str, int] = {}
    try:
        rows = list(ConsumerCheckpoint.objects.values_list("consumer", "partition", "last_done_id",
                                                           "blocked_attempts"))
        done = {(c, p): last for c, p, last, _ in rows}
        for c, _p, _last, attempts in rows:
            blocked[c] = max(blocked.get(c, 0), attempts)
        partitions = streams.all_partitions()
    except DatabaseError:
        rows, done, partitions = [], {}, []
    for consumer in CONSUMERS:
        try:
            per = [_lag(p, done.get((consumer, p), "0-0")) for p in partitions]
            lag[consumer] = sum(n for n, _ in per)
            lag_s[consumer] = round(max((s for _, s in per), default=0.0), 3)
        except RedisError:
            lag[consumer] = lag_s[consumer] = None
    return Backlog(time.monotonic(), pending, lag, lag_s, blocked)


def leases_held(prefixes: tuple[str, ...] = ("consumer:", "publisher:")) -> list[str]:
    """Resources whose lease is held right now (a pass or a publish is in the middle of a batch)."""
    from django.utils import timezone

    held = Lease.objects.filter(expires_at__gt=timezone.now()).values_list("resource", flat=True)
    return sorted(r for r in held if r.startswith(prefixes))


@dataclass
class Retries:
    dead_letters: dict[str, int]  # consumer -> dead letters recorded for the drill's events
    outbox_retried: int  # outbox rows of the drill's pairs that needed more than one publish attempt
    outbox_retries: int  # their failed attempts in all
    outbox_dead: int


def retries_get(population: Population, *, since) -> Retries:
    connections_refresh()
    dead: dict[str, int] = {}
    for consumer in DeadLetter.objects.filter(first_failed_at__gte=since,
                                              video_id__in=population.videos).values_list("consumer", flat=True):
        dead[consumer] = dead.get(consumer, 0) + 1
    retried = retries = dead_rows = 0
    for alias, users in _by_owner(population).items():
        keys = [events.aggregate_key(u, v) for u in users for v in population.videos]
        for count, status in OutboxEvent.objects.using(alias).filter(aggregate_key__in=keys).values_list(
                "retry_count", "status"):
            retried += count > 0
            retries += count
            dead_rows += status == OutboxStatus.DEAD
    return Retries(dead, retried, retries, dead_rows)
