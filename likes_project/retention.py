"""Retention rules, one registry (issue 31 §4, PRIV-3): each kind of retained row or file says how long it is
kept (a setting), how to delete one bounded batch of what is past that window, and how old the oldest thing it
keeps is. The apps register their rules in `AppConfig.ready()`; one beat job (`retention.sweep`), one command
(`manage.py retention_sweep`), one console page, the metrics and the front page's line all read this registry.

A rule never deletes an audit record; the audit log keeps pseudonyms, not user ids, for deleted accounts.

The runner (`retention_sweep`) sweeps each rule under a lease of its own, audits what it deleted
(`retention.sweep`), counts it (`likes_retention_deleted_total{rule}`) and then measures the rule's oldest kept
thing once and stores it (a `GaugeSnapshot` row `retention:<rule>` on `default`): measuring can cost a scan (an
archive without an index on its time column, a storage listing), so it runs once a sweep, never once a scrape.
The gauge part `retention` re-exports those rows as `likes_retention_oldest_age_seconds{rule}` (an age that keeps
growing between measurements, like every age gauge) beside `likes_retention_window_seconds{rule}`."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from celery import shared_task
from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from likes_project import leases, metrics
from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.cursors import iso_utc
from likes_project.errors import InvalidInput
from likes_project.eventlog.consumer import holder_id
from likes_project.eventlog.models import GaugeSnapshot
from likes_project.observability import Scrape, register_part

logger = logging.getLogger(__name__)

# Running a bounded sweep now is what "run now" of the beat job `retention-sweep` does (the same rules, the
# same windows, nobody picks a window), so it takes the permission that runs a beat job now.
RETENTION_RUN_PERMISSION = "django_celery_beat.change_periodictask"
LEASE_TTL_S = 300.0
GAUGE_KEY_PREFIX = "retention:"  # + the rule's name: a GaugeSnapshot key (at most 32 characters)
LEASE_PREFIX = "retention:"  # + the rule's name: the lease a sweep of the rule holds
OLDEST_FAMILY = "likes_retention_oldest_age_seconds"
WINDOW_FAMILY = "likes_retention_window_seconds"
DELETED_COUNTER = "likes_retention_deleted_total"
TASK_BUDGET_S = 180.0  # the beat run starts no batch after this; its soft time limit is 240 s


@dataclass(frozen=True)
class RetentionRule:
    """`name` is stable (metrics label, audit target, command argument); `setting` names the window's setting,
    in `unit` ("days" or "hours"); `sweep(cutoff, limit)` deletes up to `limit` of what is older than `cutoff`
    in its own transaction(s) and returns how many it deleted (fewer than `limit`: nothing more is due);
    `oldest()` is the age-defining instant of the oldest thing still kept that the rule may delete one day
    (what it never deletes, such as evidence, does not count; None: nothing kept). It is measured once per
    sweep, so it may cost a scan."""

    name: str
    setting: str
    unit: str
    what: str  # what it deletes, for people: "command rows that changed a relation"
    sweep: Callable[[dt.datetime, int], int]
    oldest: Callable[[], dt.datetime | None]

    def window(self) -> dt.timedelta:
        value = float(getattr(settings, self.setting))
        return dt.timedelta(days=value) if self.unit == "days" else dt.timedelta(hours=value)

    def window_text(self) -> str:
        return f"{float(getattr(settings, self.setting)):g} {self.unit}"


_RULES: dict[str, RetentionRule] = {}


def retention_rule_register(rule: RetentionRule) -> RetentionRule:
    if rule.unit not in ("days", "hours"):
        raise ValueError(f"retention rule {rule.name}: unit is days or hours")
    if len(GAUGE_KEY_PREFIX + rule.name) > GaugeSnapshot._meta.get_field("key").max_length:
        raise ValueError(f"retention rule {rule.name}: a name of at most 22 characters")
    _RULES[rule.name] = rule
    register_part("retention", _gauges)  # once, with the first rule (a name is registered once)
    return rule


def retention_rules() -> list[RetentionRule]:
    return [_RULES[name] for name in sorted(_RULES)]


def retention_rule_get(name: str) -> RetentionRule | None:
    return _RULES.get(name)


def retention_rules_named(names: Iterable[str] | None) -> list[RetentionRule]:
    """The rules `names` names, in that order (None or empty: every rule). An unknown name is refused before
    anything runs."""
    if not names:
        return retention_rules()
    unknown = [n for n in names if n not in _RULES]
    if unknown:
        raise InvalidInput(f"Unknown retention rule {unknown[0]!r}; the rules are: {', '.join(sorted(_RULES))}.",
                           code="unknown_retention_rule", rule=unknown[0])
    return [_RULES[n] for n in dict.fromkeys(names)]


# --- the runner ------------------------------------------------------------------------------------


@dataclass
class RuleSweep:
    rule: str
    cutoff: dt.datetime
    window: str
    deleted: int = 0
    batches: int = 0
    finished: bool = True  # nothing left past the cutoff (a bounded run may stop early)
    status: str = "ok"  # ok | busy (another run holds the rule's lease) | failed (its store failed)
    error: str = ""

    def as_dict(self) -> dict:
        out = {"rule": self.rule, "cutoff": iso_utc(self.cutoff), "window": self.window, "deleted": self.deleted,
               "batches": self.batches, "finished": self.finished, "status": self.status}
        return {**out, "error": self.error} if self.error else out


@dataclass
class RetentionSweepReport:
    rules: list[RuleSweep] = field(default_factory=list)

    @property
    def deleted(self) -> int:
        return sum(r.deleted for r in self.rules)

    def as_dict(self) -> dict:
        return {"deleted": self.deleted, "rules": [r.as_dict() for r in self.rules]}


def _whole(name: str, value, *, low: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
        raise InvalidInput(f"{name} must be a whole number of at least {low} (got {value!r}).",
                           code="invalid_parameter", parameter=name)


def retention_sweep(*, actor: Actor, rules: Iterable[str] | None = None, max_batches: int | None = None,
                    progress: Callable[[str, int, int], None] | None = None,
                    budget_s: float | None = None) -> RetentionSweepReport:
    """Delete what each rule (`rules` by name; default every rule) holds past its window, in batches of
    RETENTION_BATCH, under the rule's lease; audited per rule (`retention.sweep`). `max_batches` bounds the
    batches per rule (the beat run, the console); None runs each rule to its end (the command). `budget_s`: no
    batch starts after that many seconds (the rule stops unfinished). `progress(rule, deleted, so_far)` after
    every batch. A rule whose lease is held is skipped (`busy`); one whose store fails is `failed` and the
    others still run.

    Transaction: the rule's own, one per batch; then one on `default` for the audit record (a batch is complete
    and repeatable on its own, so the deletes stand if the audit fails).
    Idempotency: a re-run deletes what is left; an idle run of the system is not audited."""
    chosen = retention_rules_named(rules)
    _whole("max_batches", max_batches, low=1)
    batch = settings.RETENTION_BATCH
    _whole("RETENTION_BATCH", batch, low=1)
    deadline = None if budget_s is None else time.monotonic() + budget_s
    report = RetentionSweepReport()
    for rule in chosen:
        report.rules.append(_rule_sweep(rule, actor=actor, batch=batch, max_batches=max_batches, deadline=deadline,
                                        progress=progress))
    return report


def _rule_sweep(rule: RetentionRule, *, actor: Actor, batch: int, max_batches: int | None, deadline: float | None,
                progress) -> RuleSweep:
    run = RuleSweep(rule=rule.name, cutoff=timezone.now() - rule.window(), window=rule.window_text())
    grant = leases.lease_acquire(resource=LEASE_PREFIX + rule.name, holder=holder_id(), ttl_s=LEASE_TTL_S)
    if grant is None:
        run.status, run.finished = "busy", False
        return run
    try:
        while True:
            n = rule.sweep(run.cutoff, batch)
            run.deleted += n
            run.batches += 1
            if n:
                metrics.inc(DELETED_COUNTER, n, rule=rule.name)
            if progress is not None:
                progress(rule.name, n, run.deleted)
            if n < batch:
                break
            if ((max_batches is not None and run.batches >= max_batches)
                    or (deadline is not None and time.monotonic() >= deadline)):
                run.finished = False  # the next run goes on from here (every rule deletes oldest first)
                break
            leases.lease_renew(grant, ttl_s=LEASE_TTL_S)
    except Exception as exc:  # one rule's store down must not stop the others: recorded and logged
        logger.warning("retention rule %s failed: %s", rule.name, exc.__class__.__name__, exc_info=True)
        run.status, run.error, run.finished = "failed", exc.__class__.__name__, False
    finally:
        leases.lease_release(grant)
    if run.deleted or actor.channel != "system":  # an idle beat run is not worth an audit row
        params = {"cutoff": iso_utc(run.cutoff), "window": run.window, "setting": rule.setting,
                  "deleted": run.deleted, "batches": run.batches, "finished": run.finished}
        if run.error:
            params["error"] = run.error
        with transaction.atomic(using="default", durable=True):
            audit_record(actor=actor, action="retention.sweep", target_type="retention_rule", target_id=rule.name,
                         params=params, outcome="applied" if run.status == "ok" else run.status)
    retention_measure(rule)
    return run


# --- the oldest kept thing, measured once a sweep --------------------------------------------------

_STORE_SQL = f"""
INSERT INTO {GaugeSnapshot._meta.db_table} AS g (key, computed_at, duration_s, families, errors)
VALUES (%s, %s, %s, %s::jsonb, '[]'::jsonb)
ON CONFLICT (key) DO UPDATE SET computed_at = EXCLUDED.computed_at, duration_s = EXCLUDED.duration_s,
       families = EXCLUDED.families, errors = EXCLUDED.errors
 WHERE g.computed_at < EXCLUDED.computed_at
"""
_OLDEST_HELP = ("Age of the oldest thing a retention rule keeps and may delete one day (0: none), as of its "
                "last sweep.")


def retention_measure(rule: RetentionRule) -> dt.datetime | None:
    """Measure `rule.oldest()` now and store it for the gauges, the console and `--status` (a failing store
    keeps the previous measurement and is logged).

    Transaction: one statement on `default`. Idempotency: a measurement only replaces an older one."""
    at, started = timezone.now(), time.monotonic()
    try:
        oldest = rule.oldest()
    except Exception as exc:  # a store down: the previous measurement stays (its age keeps growing)
        logger.warning("retention rule %s: oldest not measured: %s", rule.name, exc.__class__.__name__,
                       exc_info=True)
        return None
    families = [{"name": OLDEST_FAMILY, "help": _OLDEST_HELP, "since": True,
                 "samples": [[{"rule": rule.name}, None if oldest is None else oldest.timestamp()]]}]
    with transaction.atomic(using="default", durable=True), connections["default"].cursor() as cursor:
        cursor.execute(_STORE_SQL, [GAUGE_KEY_PREFIX + rule.name, at, round(time.monotonic() - started, 3),
                                    json.dumps(families)])
    return oldest


@dataclass(frozen=True)
class RetentionStatus:
    rule: str
    what: str
    setting: str
    window: str  # "180 days"
    window_s: float
    oldest: dt.datetime | None  # None: nothing kept (or not measured yet: measured_at is None)
    measured_at: dt.datetime | None
    now: dt.datetime

    @property
    def age_s(self) -> float | None:
        return None if self.oldest is None else max(0.0, (self.now - self.oldest).total_seconds())

    @property
    def age_text(self) -> str:
        if self.age_s is None:
            return "-" if self.measured_at is None else "nothing kept"
        return f"{self.age_s / 86400:.1f} days" if self.age_s >= 2 * 86400 else f"{self.age_s / 3600:.1f} h"

    @property
    def due(self) -> bool:
        """Something past the window is still kept: the next sweep has work."""
        return self.age_s is not None and self.age_s > self.window_s

    @property
    def behind(self) -> bool:
        """Past the window by more than two sweep periods: the sweeps are not keeping up (an alert)."""
        return self.age_s is not None and self.age_s > self.window_s + 2 * float(settings.RETENTION_EVERY_S)

    def as_dict(self) -> dict:
        return {"rule": self.rule, "what": self.what, "setting": self.setting, "window": self.window,
                "windowSeconds": self.window_s, "oldest": None if self.oldest is None else iso_utc(self.oldest),
                "oldestAgeSeconds": None if self.age_s is None else round(self.age_s, 3),
                "measuredAt": None if self.measured_at is None else iso_utc(self.measured_at), "due": self.due}


def _stored() -> dict[str, tuple[dt.datetime | None, dt.datetime]]:
    """rule -> (its oldest kept thing, when that was measured), from the stored measurements."""
    out = {}
    for key, at, families in GaugeSnapshot.objects.filter(key__startswith=GAUGE_KEY_PREFIX).values_list(
            "key", "computed_at", "families"):
        for _labels, epoch in (families[0]["samples"] if families else []):
            out[key.removeprefix(GAUGE_KEY_PREFIX)] = (
                None if epoch is None else dt.datetime.fromtimestamp(epoch, tz=dt.UTC), at)
    return out


def retention_status(*, rules: Iterable[str] | None = None, live: bool = False) -> list[RetentionStatus]:
    """Each rule (`rules` by name; default every rule): what it deletes, its setting and window, the oldest thing
    it keeps and whether something is due. By default as measured after the rule's last sweep (a read of
    `default`, for the console); `live` measures now (each rule's `oldest()`, for the command), storing nothing."""
    chosen = retention_rules_named(rules)
    stored = {} if live else _stored()
    now = timezone.now()
    out = []
    for rule in chosen:
        oldest, at = (rule.oldest(), now) if live else stored.get(rule.name, (None, None))
        out.append(RetentionStatus(rule=rule.name, what=rule.what, setting=rule.setting, window=rule.window_text(),
                                   window_s=rule.window().total_seconds(), oldest=oldest, measured_at=at, now=now))
    return out


def _gauges(scrape: Scrape) -> None:
    """The gauge part `retention`: every rule's window, and its oldest kept thing as last measured."""
    stored = _stored()
    window = scrape.family(WINDOW_FAMILY, "The retention window of each rule (its setting), in seconds.")
    oldest = scrape.family(OLDEST_FAMILY, _OLDEST_HELP)
    for rule in retention_rules():
        window.add(rule.window().total_seconds(), rule=rule.name)
        if rule.name in stored:
            oldest.add_since(stored[rule.name][0], rule=rule.name)


# --- the beat job ----------------------------------------------------------------------------------


@shared_task(name="retention.sweep", acks_late=True, ignore_result=True, soft_time_limit=240, time_limit=270)
def retention_sweep_task() -> dict:
    """Beat (every RETENTION_EVERY_S): every rule, at most RETENTION_MAX_BATCHES batches each and TASK_BUDGET_S
    in all; the next run goes on where this one stopped. A rule another run is sweeping is skipped (busy).
    Defined beside its runner because the kit owns its job: every app that registers a rule imports this
    module, so each worker knows the task."""
    return retention_sweep(actor=system_actor("retention"), max_batches=int(settings.RETENTION_MAX_BATCHES),
                           budget_s=TASK_BUDGET_S).as_dict()
