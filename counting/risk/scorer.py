"""The asynchronous risk scorer (RISK-1 layer 3, issue 32 §1): consumer `risk` of the event log, on the shared
consumer framework, judging accounts from the likes they give. Each signal is named, with its threshold in settings:

- `young_account`: the account joined less than RISK_YOUNG_ACCOUNT_S ago;
- `burst`: it gave more than RISK_BURST_LIKES_PER_MINUTE likes in 60 seconds (a sliding window over per-minute counts);
- `ring`: a device it liked from has carried RISK_RING_MIN_ACCOUNTS accounts or more within RISK_RING_WINDOW_S;
- `fresh_upload`: it liked a video less than RISK_FRESH_UPLOAD_S after the video was published (the video service's
  `publishedAt`; a video pushed without one never fires it).

A signal that fires adds its weight (RISK_SIGNAL_WEIGHTS); a score of RISK_DOWNWEIGHT_SCORE asks for down-weight,
RISK_FREEZE_SCORE for freeze. A verdict is written only when it raises the account's level (none pending already),
with its signals as evidence. It acts through the risk ledger, as an operator's request does: an account alone, or a
ring of at most RISK_AUTO_MAX_USERS accounts, gets a decision approved by the scorer's own rule (`auto:`), applied at
once (its likes leave the public counts); a bigger ring's decisions wait for a second person's approval. A ring is
judged by its size when the verdict is taken: the log arrives partition by partition, so the first members of a
growing ring may be acted on before it passes the limit, and the rest then wait. Every level is reversible by an
operator (`risk_account ... --level clear`), audited.

The windows live in Redis (counting.cache's keys); a replayed batch may count a like twice there, which can only
raise suspicion, never a count: the decisions are what change counts, and they are version-guarded and deduplicated
by the account's current level and pending decisions."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from redis.exceptions import RedisError

from counting.cache import risk_device_key, risk_likes_key
from counting.risk import accounts, services
from counting.risk.models import RiskDecision, RiskKind, RiskStatus, RiskVerdict, VerdictStatus
from likes_project import metrics
from likes_project.audit.services import system_actor
from likes_project.eventlog.consumer import ApplyResult
from likes_project.eventlog.retry import retryable_from
from likes_project.eventlog.streams import StreamEntry
from likes_project.redis_client import cache_redis
from relations.events import LIKED, validate_event
from relations.models import AccountRiskLevel, AccountStatus, VideoSnapshot

logger = logging.getLogger(__name__)

RISK_CONSUMER = "risk"
VERDICT_LOCK_NS = 0x4C4B5256  # "LKRV": with hashtext(user id), serialises one account's verdicts
SCORER = "risk-scorer"
RANK = {AccountRiskLevel.NONE: 0, AccountRiskLevel.DOWNWEIGHT: 1, AccountRiskLevel.FREEZE: 2}


def level_for(score: int) -> str:
    if score >= settings.RISK_FREEZE_SCORE:
        return AccountRiskLevel.FREEZE
    if score >= settings.RISK_DOWNWEIGHT_SCORE:
        return AccountRiskLevel.DOWNWEIGHT
    return AccountRiskLevel.NONE


def sliding_minute(this_minute: int, minute_before: int, at: float) -> int:
    """The likes in the 60 seconds up to `at`, from the counts of its calendar minute and the one before: the
    minute before weighted by how much of it the window still covers (the sliding-window counter). Counting by
    calendar minute alone let a burst astride a minute's edge pass at twice the threshold."""
    return this_minute + int(minute_before * (1 - (at % 60) / 60))


class RiskScorer:
    """Consumer `risk` (`riskscore.project_partition` per stream partition, on the Celery queue `risk`; in the
    default pass groups its passes run in the notifications' task, on the queue `notify`, D143)."""

    name = RISK_CONSUMER

    def validate(self, entry: StreamEntry) -> None:
        validate_event(entry.event)

    def apply(self, entries: list[StreamEntry], *, consumer: str, partition: int, token: int) -> ApplyResult:
        result = ApplyResult(done={e.entry_id for e in entries}, applied=len(entries))
        if not settings.RISK_SCORER_ENABLED:
            return result
        likes = [e.event for e in entries if e.event.get("absoluteState") == LIKED]
        if not likes:
            return result
        try:
            judged = self._signals(likes)
            for user_id, (signals, ring) in sorted(judged.items()):
                self._verdict(user_id, signals, ring)
        except (RedisError, DatabaseError) as exc:  # the batch is replayed; what it decided is deduplicated
            retry = retryable_from(exc)
            return ApplyResult(failed={e.entry_id: retry for e in entries})
        return result

    # --- the signals ---------------------------------------------------------------------------

    def _signals(self, likes: list[dict]) -> dict[int, tuple[dict, list[int]]]:
        """user -> ({signal: evidence}, the ring's accounts) for the users of `likes`, windows updated."""
        per_minute: Counter = Counter()
        latest: dict[tuple[int, int], float] = {}  # (user, minute) -> the batch's last like of it (epoch seconds)
        devices: dict[str, set[int]] = defaultdict(set)
        for ev in likes:
            at = (parse_datetime(ev.get("stateChangedAt") or "") or timezone.now()).timestamp()
            key = (ev["userId"], int(at // 60))
            per_minute[key] += 1
            latest[key] = max(latest.get(key, at), at)
            if ev.get("deviceId"):
                devices[ev["deviceId"]].add(ev["userId"])
        pipe = cache_redis().pipeline(transaction=False)
        for (user_id, minute), n in per_minute.items():
            pipe.incrby(risk_likes_key(user_id, minute), n)
            pipe.expire(risk_likes_key(user_id, minute), 180)
        for user_id, minute in per_minute:  # after every count of the batch: the minute before, as it now stands
            pipe.get(risk_likes_key(user_id, minute - 1))
        for device, users in devices.items():
            pipe.sadd(risk_device_key(device), *users)
            pipe.expire(risk_device_key(device), settings.RISK_RING_WINDOW_S)
            pipe.smembers(risk_device_key(device))
        replies = pipe.execute()
        k = len(per_minute)
        bursts = {key: sliding_minute(replies[2 * i], int(replies[2 * k + i] or 0), latest[key])
                  for i, key in enumerate(per_minute)}
        rings = {device: sorted(int(u) for u in replies[3 * k + 3 * i + 2]) for i, device in enumerate(devices)}
        # A ring is judged whole when it reaches its size: its members seen in earlier batches (or on other
        # partitions) get their verdict now, not only the ones of this batch.
        users = {ev["userId"] for ev in likes} | {
            u for members in rings.values() if len(members) >= settings.RISK_RING_MIN_ACCOUNTS for u in members}
        joined = dict(get_user_model().objects.filter(pk__in=users).values_list("pk", "date_joined"))
        fresh = self._fresh_likes(likes)
        now = timezone.now()
        out: dict[int, tuple[dict, list[int]]] = {}
        for user_id in users:
            signals, ring = {}, []
            if joined.get(user_id) and (now - joined[user_id]).total_seconds() < settings.RISK_YOUNG_ACCOUNT_S:
                signals["young_account"] = {"joinedSecondsAgo": int((now - joined[user_id]).total_seconds())}
            peak = max((n for (u, _m), n in bursts.items() if u == user_id), default=0)
            if peak > settings.RISK_BURST_LIKES_PER_MINUTE:
                signals["burst"] = {"likesInOneMinute": peak}
            for device, members in rings.items():
                if user_id in members and len(members) >= settings.RISK_RING_MIN_ACCOUNTS:
                    signals["ring"] = {"device": device, "accounts": len(members)}
                    ring = members
            if fresh.get(user_id):
                signals["fresh_upload"] = {"videos": sorted(fresh[user_id])[:5],
                                           "secondsAfterUpload": min(fresh[user_id].values())}
            out[user_id] = (signals, ring)
        return out

    @staticmethod
    def _fresh_likes(likes: list[dict]) -> dict[int, dict[str, int]]:
        """user -> {video: seconds after its publication} for the likes given within RISK_FRESH_UPLOAD_S of it."""
        published = dict(VideoSnapshot.objects.filter(
            video_id__in={ev["videoId"] for ev in likes}, published_at__isnull=False).values_list(
            "video_id", "published_at"))
        out: dict[int, dict[str, int]] = defaultdict(dict)
        for ev in likes:
            at = parse_datetime(ev.get("stateChangedAt") or "")
            if at is None or ev["videoId"] not in published:
                continue
            after = (at - published[ev["videoId"]]).total_seconds()
            if 0 <= after < settings.RISK_FRESH_UPLOAD_S:
                out[ev["userId"]][ev["videoId"]] = int(after)
        return out

    # --- the verdict ----------------------------------------------------------------------------

    def _verdict(self, user_id: int, signals: dict, ring: list[int]) -> None:
        score = sum(settings.RISK_SIGNAL_WEIGHTS.get(name, 0) for name in signals)
        level = level_for(score)
        if level == AccountRiskLevel.NONE:
            return
        # Two partitions' passes may judge one ring's member at once (a ring is judged whole): the check below and
        # the decision it creates are serialised per account by a session lock, so one raise is decided once.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", [VERDICT_LOCK_NS, str(user_id)])
            try:
                self._verdict_locked(user_id, level, score, signals, ring)
            finally:
                cursor.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", [VERDICT_LOCK_NS, str(user_id)])

    def _verdict_locked(self, user_id: int, level: str, score: int, signals: dict, ring: list[int]) -> None:
        current = AccountStatus.objects.filter(user_id=user_id).values_list("risk_level", flat=True).first()
        if RANK[level] <= RANK.get(current or AccountRiskLevel.NONE, 0) or RiskDecision.objects.filter(
                kind=RiskKind.ACCOUNT, params__users=[user_id],
                status__in=[RiskStatus.AWAITING_APPROVAL, RiskStatus.APPROVED, RiskStatus.APPLYING]).exists():
            return  # already there, or on its way: a replayed batch decides nothing twice
        evidence = {"score": score, "signals": signals}
        params = {"kind": RiskKind.ACCOUNT, "video": "", "users": [user_id], "level": level,
                  "reason": f"risk scorer: {', '.join(sorted(signals))} (score {score})",
                  "evidence": str(evidence)[:services.EVIDENCE_MAX], "restores": None}
        if len(ring) > settings.RISK_AUTO_MAX_USERS:
            decision = services.decision_create(system_actor(SCORER), params)
            status = VerdictStatus.AWAITING_APPROVAL
        else:
            decision = accounts.account_level_apply(services.decision_auto_approve(params, by=SCORER).pk)
            status = VerdictStatus.APPLIED
        RiskVerdict.objects.create(user_id=user_id, level=level, score=score, signals=signals,
                                   decision_id=decision.pk, status=status)
        metrics.inc("likes_risk_verdicts_total", level=level, status=status)
        logger.info("risk verdict: user %s %s (score %s: %s), decision %s %s", user_id, level, score,
                    ", ".join(sorted(signals)), decision.pk, status)

