"""The console's front page (issue 14 §0): the pipeline's health at a glance, and the gauge history its
charts are drawn from.

The page reads only `default`: the live lists (switches set, repairs awaiting approval, jobs not
finished, the last verdicts) from their tables there, and everything that lives in another store (the
outbox age of each relation shard, each consumer's lag, dead letters, open diffs) from the stored gauges
the beat job `observability.refresh_gauges` computes (D46). Opening the console therefore costs a few
indexed reads on one database, whatever the size of the outbox or the streams, and still answers when a
shard or Redis is down: exactly when an operator opens it. The page says how old those gauges are.

The charts are the last hour of `GaugeSample` rows (one per stored snapshot, copied by the beat job
`opsconsole.gauge_history_sample`), drawn as inline SVG polylines by `sparkline`: served by the project
itself, no script, no CDN.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from counting import hotspots
from likes_project import switches
from likes_project.admin_kit import admin_url
from likes_project.eventlog.models import GaugeSnapshot
from likes_project.observability import SNAPSHOT_KEY, scrape_families
from likes_project.opsjobs.models import FINISHED_JOB_STATUSES, OpsJob
from opsconsole.models import GaugeSample
from reconciliation.models import FINISHED_RUN_STATUSES, CheckRun, RepairRequest, RepairStatus, RunMode

DASHBOARD_PERMISSION = "opsconsole.view_dashboard"
WINDOW = dt.timedelta(hours=1)
# The families the history keeps (everything the front page charts); the others are not copied.
CHARTED = (
    "likes_outbox_oldest_pending_age_seconds", "likes_outbox_rows", "likes_consumer_lag_entries",
    "likes_consumer_lag_seconds", "likes_dead_letters", "likes_dead_letter_oldest_age_seconds",
    "likes_reconcile_open_diffs", "likes_repairs_awaiting_approval", "likes_reconcile_last_run_passed",
    "likes_ops_jobs_unfinished", "likes_switches_set", "likes_ledgers_unfinished", "likes_partition_skew_ratio",
)
PENDING_OUTBOX = ("NEW", "RETRY", "UNCERTAIN")
LIST_LIMIT = 20  # rows a list panel shows; the model list behind its link has the rest

Samples = list[tuple[dict, float]]


# --- the history ---------------------------------------------------------------------------------


def gauge_history_sample(now: dt.datetime | None = None) -> bool:
    """Copy the stored gauges into the history, once per stored snapshot, and prune what is older
    than CONSOLE_HISTORY_KEEP_S (the beat job `opsconsole.gauge_history_sample`). True when a sample
    was added. Idempotent: a snapshot already copied (the same `computed_at`) is not copied again."""
    now = now or timezone.now()
    row = GaugeSnapshot.objects.filter(key=SNAPSHOT_KEY).only("computed_at").first()
    added = False
    if row is not None:
        # The ages as of the snapshot itself, the way a scrape at that moment would have exported them.
        values = {name: [[labels, v] for labels, v in samples]
                  for name, _help, samples in scrape_families(now=row.computed_at) if name in CHARTED}
        added = GaugeSample.objects.get_or_create(at=row.computed_at, defaults={"values": values})[1]
    keep = dt.timedelta(seconds=float(settings.CONSOLE_HISTORY_KEEP_S))
    GaugeSample.objects.filter(at__lt=now - keep).delete()
    return added


def _total(samples: Iterable, match: dict[str, str | tuple[str, ...]]) -> float:
    def ok(labels: dict) -> bool:
        return all(labels.get(k) in (v if isinstance(v, tuple) else (v,)) for k, v in match.items())

    return float(sum(v or 0.0 for labels, v in samples if ok(labels)))


@dataclass
class History:
    start: dt.datetime
    end: dt.datetime
    rows: list[tuple[dt.datetime, dict]]

    def series(self, family: str, **match: str | tuple[str, ...]) -> list[tuple[dt.datetime, float]]:
        """The sum of `family`'s samples whose labels match, at every stored sample that has the family."""
        return [(at, _total(values[family], match)) for at, values in self.rows if family in values]

    def sparkline(self, family: str, *, what: str, **match: str | tuple[str, ...]) -> SafeString:
        """`series(family, **match)` drawn over the window (`sparkline`)."""
        return sparkline(self.series(family, **match), start=self.start, end=self.end, what=what)


def history_load(now: dt.datetime, current: dict[str, Samples] | None = None) -> History:
    """The last hour of samples, and `current` (the stored gauges the tables show) as its newest point: a chart
    ends at the value its table shows, not at the last minute's sample."""
    start = now - WINDOW
    rows = list(GaugeSample.objects.filter(at__gte=start).order_by("at").values_list("at", "values"))
    if current:
        rows.append((now, {name: [[labels, v] for labels, v in current[name]] for name in CHARTED if name in current}))
    return History(start=start, end=now, rows=rows)


def sparkline(points: list[tuple[dt.datetime, float]], *, start: dt.datetime, end: dt.datetime, what: str,
              width: int = 200, height: int = 34) -> SafeString:
    """An inline SVG line of `points` over [start, end] with its scale written on it: the top of the scale (the
    maximum) and 0 on the left, the current value on the right of its last point, and the range in its title."""
    if not points:
        return mark_safe('<span class="spark-empty" title="no stored gauges in the last hour">no history</span>')
    span = max((end - start).total_seconds(), 1.0)
    values = [v for _t, v in points]
    top = max(values) or 1.0
    left, right = 30, 44  # room for the scale and for the current value
    plot = width - left - right
    coords = " ".join(
        f"{left + (min(max((t - start).total_seconds(), 0.0), span) / span) * plot:.1f},"
        f"{height - 2 - (v / top) * (height - 6):.1f}" for t, v in points)
    label = f"{what}, last hour: min {_num(min(values))}, max {_num(max(values))}, now {_num(values[-1])}"
    last_x, last_y = coords.rsplit(" ", 1)[-1].split(",")
    return format_html(
        '<svg class="spark" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{label}">'
        '<title>{label}</title>'
        '<text class="spark-scale" x="{sx}" y="8" text-anchor="end">{top}</text>'
        '<text class="spark-scale" x="{sx}" y="{h}" text-anchor="end">0</text>'
        '<line x1="{left}" y1="{base}" x2="{end}" y2="{base}" stroke="currentColor" stroke-opacity="0.25"/>'
        '<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{coords}"/>'
        '<circle cx="{x}" cy="{y}" r="2" fill="currentColor"/>'  # the latest value, drawn even when alone
        '<text class="spark-now" x="{nx}" y="{ny}">{now}</text></svg>',
        w=width, h=height, label=label, coords=coords, x=last_x, y=last_y, sx=left - 3, top=_num(top),
        left=left, end=left + plot, base=height - 2, nx=float(last_x) + 4, ny=min(max(float(last_y) + 4, 9), height),
        now=_num(values[-1]))


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 or abs(v) >= 100 else f"{v:.2g}" if abs(v) < 1 else f"{v:.1f}"


# --- the page -----------------------------------------------------------------------------------


@dataclass
class Cell:
    text: str
    url: str | None = None
    warn: bool = False
    svg: SafeString | None = None  # a chart drawn in the cell instead of text


@dataclass
class Panel:
    key: str
    title: str
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    charts: list[tuple[str, SafeString]] = field(default_factory=list)
    empty: str = "None."
    link: tuple[str, str] | None = None  # (label, url) of the full list
    alert: bool = False  # something here needs an operator
    notes: list[Cell] = field(default_factory=list)  # lines under the table


def _list_link(label: str, name: str, query: str | None = None) -> tuple[str, str]:
    """A panel's link to the full list: the console page `admin:<name>` ("" when it is not registered)."""
    return label, admin_url(name, query=query) or ""


def _ago(at: dt.datetime | None, now: dt.datetime) -> str:
    if at is None:
        return "never"
    return f"{_seconds(max(0.0, (now - at).total_seconds()))} ago"


def _seconds(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def _current(now: dt.datetime) -> tuple[dict[str, Samples], float | None, list[str]]:
    """The stored gauges as a scrape now exports them: {family: samples}, their age, the failed parts."""
    families = {name: samples for name, _help, samples in scrape_families(now=now)}
    age = families.pop("likes_metrics_gauges_age_seconds", [({}, None)])[0][1]
    errors = [labels.get("part", "") for labels, _v in families.pop("likes_metrics_scrape_errors", [])]
    return families, age, errors


def _switches(now: dt.datetime, hist: History) -> Panel:
    panel = Panel("switches", "Switches set", ["Switch", "Key", "Reason", "Set by", "Since"],
                  empty="No switch is set: commands, publishers, consumers, auto-repair and refreshes all run.")
    for s in switches.switches_set():
        panel.rows.append([Cell(s.kind, warn=True), Cell(s.key), Cell(s.reason), Cell(s.updated_by),
                           Cell(_ago(s.updated_at, now))])
    panel.alert = bool(panel.rows)
    panel.charts.append(("switches set", hist.sparkline("likes_switches_set", what="switches set")))
    return panel


def _outbox(cur: dict[str, Samples], hist: History) -> Panel:
    panel = Panel("outbox", "Outbox: oldest unpublished event per relation shard",
                  ["Shard", "Oldest unpublished", "Unpublished rows", "Last hour (age)"],
                  empty="No outbox gauge stored yet.")
    pending = cur.get("likes_outbox_rows", [])
    for labels, age in sorted(cur.get("likes_outbox_oldest_pending_age_seconds", []), key=lambda s: s[0]["shard"]):
        shard = labels["shard"]
        rows = _total(pending, {"shard": shard, "status": PENDING_OUTBOX})
        chart = hist.sparkline("likes_outbox_oldest_pending_age_seconds", shard=shard,
                               what=f"{shard} oldest unpublished (s)")
        panel.rows.append([Cell(shard), Cell(_seconds(age or 0.0), warn=(age or 0) > 60), Cell(f"{rows:.0f}"),
                           Cell("", svg=chart)])
        panel.alert = panel.alert or (age or 0) > 60
    panel.link = _list_link("Outbox lookup", "opsconsole_lookup")
    return panel


def _lag(cur: dict[str, Samples], hist: History) -> Panel:
    panel = Panel("lag", "Consumer lag per partition",
                  ["Consumer", "Partition", "Entries behind", "Oldest behind", "Last hour (s)"],
                  empty="No consumer has a checkpoint yet.")
    seconds = {(lb["consumer"], lb["partition"]): v for lb, v in cur.get("likes_consumer_lag_seconds", [])}
    for labels, entries in sorted(cur.get("likes_consumer_lag_entries", []),
                                  key=lambda s: (s[0]["consumer"], int(s[0]["partition"]))):
        key = (labels["consumer"], labels["partition"])
        age = seconds.get(key) or 0.0
        chart = hist.sparkline("likes_consumer_lag_seconds", consumer=key[0], partition=key[1],
                               what=f"{key[0]}[{key[1]}] lag (s)")
        panel.rows.append([Cell(key[0]), Cell(key[1]), Cell(f"{entries or 0:.0f}", warn=(entries or 0) > 1000),
                           Cell(_seconds(age), warn=age > 30), Cell("", svg=chart)])
        panel.alert = panel.alert or age > 30
    panel.link = _list_link("Consumer checkpoints", "eventlog_consumercheckpoint_changelist")
    return panel


def _dead_letters(cur: dict[str, Samples], hist: History) -> Panel:
    panel = Panel("dead_letters", "Dead letters", ["Consumer", "New", "Requeued", "Oldest new"],
                  empty="No dead letter.")
    counts = cur.get("likes_dead_letters", [])
    oldest = _total(cur.get("likes_dead_letter_oldest_age_seconds", []), {})
    for consumer in sorted({lb["consumer"] for lb, _v in counts}):
        new = _total(counts, {"consumer": consumer, "status": "NEW"})
        requeued = _total(counts, {"consumer": consumer, "status": "REQUEUED"})
        if new or requeued:
            panel.rows.append([Cell(consumer), Cell(f"{new:.0f}", warn=new > 0), Cell(f"{requeued:.0f}"),
                               Cell(_seconds(oldest) if new else "")])
            panel.alert = panel.alert or new > 0
    panel.charts.append(("new", hist.sparkline("likes_dead_letters", status="NEW", what="NEW dead letters")))
    panel.link = _list_link("Dead letters", "eventlog_deadletter_changelist", query="status__exact=NEW")
    return panel


def _diffs(cur: dict[str, Samples], hist: History) -> Panel:
    panel = Panel("diffs", "Open diffs", ["Layer", "NEW or FIXING"], empty="No open diff.")
    for labels, n in sorted(cur.get("likes_reconcile_open_diffs", []), key=lambda s: s[0]["layer"]):
        if n:
            panel.rows.append([Cell(labels["layer"]), Cell(f"{n:.0f}", warn=True)])
    panel.alert = bool(panel.rows)
    panel.charts.append(("open", hist.sparkline("likes_reconcile_open_diffs", what="open diffs")))
    panel.link = _list_link("Diffs", "reconciliation_checkdiff_changelist")
    return panel


def _repairs(now: dt.datetime, hist: History) -> Panel:
    panel = Panel("repairs", "Repairs awaiting approval", ["Repair", "Requested by", "Reason", "Waiting"],
                  empty="No repair is waiting for approval.")
    waiting = RepairRequest.objects.filter(status=RepairStatus.AWAITING_APPROVAL).order_by("created_at")
    for r in waiting[:LIST_LIMIT]:
        panel.rows.append([Cell(f"#{r.pk}", admin_url("reconciliation_repairrequest_change", r.pk)),
                           Cell(r.requested_by), Cell(r.reason), Cell(_ago(r.created_at, now))])
    panel.alert = bool(panel.rows)
    panel.charts.append(("waiting", hist.sparkline("likes_repairs_awaiting_approval",
                                                   what="repairs awaiting approval")))
    panel.link = _list_link("Repairs", "reconciliation_repairrequest_changelist")
    return panel


def _jobs(now: dt.datetime, hist: History) -> Panel:
    panel = Panel("jobs", "Jobs running", ["Job", "Kind", "Target", "Status", "Progress", "Latest"],
                  empty="No job is queued or running.")
    for job in OpsJob.objects.exclude(status__in=FINISHED_JOB_STATUSES).order_by("id")[:LIST_LIMIT]:
        progress = f"{job.done:,} / {job.total:,} {job.unit}" if job.total else f"{job.done:,} {job.unit}"
        if job.total:
            progress += f" ({100 * job.done / job.total:.0f}%)"
        panel.rows.append([Cell(f"#{job.pk}", admin_url("opsjobs_opsjob_change", job.pk)), Cell(job.kind),
                           Cell(job.target), Cell(job.status), Cell(progress),
                           Cell(f"{job.message} ({_ago(job.updated_at, now)})" if job.message else "")])
    panel.charts.append(("unfinished", hist.sparkline("likes_ops_jobs_unfinished", what="jobs queued or running")))
    panel.link = _list_link("Jobs", "opsjobs_opsjob_changelist")
    return panel


def _moves(now: dt.datetime, hist: History) -> Panel:
    """Bucket migrations and relation slot moves not finished: one waiting for a second person, or approved with
    no job running it (the sweeper resumes a dead worker's move within a lease; longer, it is stuck), is an
    alert."""
    from counting.services.migration.ledger import LEDGER as MIGRATIONS
    from likes_project.ledgers.model import TERMINAL, LedgerState
    from relations.services.slot_moves.ledger import LEDGER as SLOT_MOVES

    panel = Panel("moves", "Moves not finished (bucket migrations, relation slot moves)",
                  ["Move", "What", "State", "In it for", "Job", "Requested by"], empty="No move is under way.")
    running = set(OpsJob.objects.exclude(status__in=FINISHED_JOB_STATUSES).values_list("pk", flat=True))
    for led in (MIGRATIONS, SLOT_MOVES):
        meta = led.model._meta
        for m in led.model.objects.exclude(state__in=TERMINAL).order_by("id")[:LIST_LIMIT]:
            waiting = m.state == LedgerState.AWAITING_APPROVAL
            stuck = not waiting and m.job_id not in running
            job = (Cell(f"#{m.job_id}", admin_url("opsjobs_opsjob_change", m.job_id), warn=stuck) if m.job_id
                   else Cell("-", warn=stuck))
            page = admin_url(f"{meta.app_label}_{meta.model_name}_change", m.pk)
            panel.rows.append([Cell(f"{led.noun} {m.pk}", page), Cell(led.summary(m)),
                               Cell(m.state, warn=waiting or stuck or bool(m.error)),
                               Cell(_ago(m.state_changed_at, now).removesuffix(" ago")), job, Cell(m.requested_by)])
            panel.alert = panel.alert or waiting or stuck or bool(m.error)
    panel.charts.append(("unfinished", hist.sparkline("likes_ledgers_unfinished", what="moves not finished")))
    return panel


def _subscriptions(cur: dict[str, Samples], now: dt.datetime, hist: History) -> Panel:
    """Other teams' subscriptions to the event log (issue 31 §1): one behind its retention (it needs a replay) or
    lagging past its alert threshold is an alert."""
    from likes_project.subscriptions.models import Subscription, SubscriptionStatus

    panel = Panel("subscriptions", "Subscriptions behind or lagging", ["Subscription", "Owner", "Status", "Lag",
                                                                       "Last ack"],
                  empty="No subscription is lagging.")
    lags = {labels["subscription"]: v for labels, v in cur.get("likes_subscription_lag_seconds", [])}
    for sub in Subscription.objects.exclude(status=SubscriptionStatus.RETIRED).order_by("name"):
        behind = sub.status == SubscriptionStatus.BEHIND_RETENTION
        lag = lags.get(sub.name, 0.0)
        if not behind and lag <= sub.alert_lag_s and sub.status == SubscriptionStatus.ACTIVE:
            continue
        panel.rows.append([Cell(sub.name, admin_url("subscriptions_subscription_change", sub.pk)), Cell(sub.owner),
                           Cell(sub.status, warn=behind), Cell("-" if behind else _seconds(lag),
                                                               warn=lag > sub.alert_lag_s),
                           Cell(_ago(sub.last_ack_at, now))])
        panel.alert = panel.alert or behind or lag > sub.alert_lag_s
        if len(panel.rows) >= LIST_LIMIT:
            break
    panel.charts.append(("behind", hist.sparkline("likes_subscription_behind_retention",
                                                  what="subscriptions behind retention")))
    panel.link = _list_link("Subscriptions", "subscriptions_subscription_changelist")
    return panel


def _retention() -> Panel:
    """Retention (issue 31 §4, PRIV-3): each rule's window and the oldest thing it keeps, as measured after its last
    sweep (rows on `default`). A rule past its window by more than two sweep periods is not keeping up: an alert."""
    from likes_project.retention import retention_status

    panel = Panel("retention", "Retention", ["Rule", "Window", "Oldest kept", "Measured"],
                  empty="No retention rule is registered.")
    for s in retention_status():
        panel.rows.append([Cell(s.rule), Cell(s.window), Cell(s.age_text + (" (due)" if s.due else ""), warn=s.behind),
                           Cell(_ago(s.measured_at, s.now) if s.measured_at else "not yet")])
        panel.alert = panel.alert or s.behind
    panel.link = _list_link("Retention", "retention_sweep")
    return panel


def _hotspots(cur: dict[str, Samples], hist: History) -> Panel:
    """Where the writes go (issue 32 §2), from the stored gauges: each count partition's share of the last 5
    minutes' writes and its hottest buckets, the hottest videos, and past HOTSPOT_MOVE_SUGGEST_SHARE the suggested
    bucket move, one click from the migration's plan form filled in (nothing moves without its approval)."""
    from counting.observability import hotspot_window_from
    from counting.services.migration.ledger import LEDGER

    panel = Panel("hotspots", "Hot spots: writes per count partition (last 5 minutes)",
                  ["Partition", "Share", "Writes 1 min / 5 min", "Hottest buckets (writes)"],
                  empty="No write recorded in the last 5 minutes.")
    window, minute = (hotspot_window_from(cur, s) for s in (hotspots.SUGGEST_WINDOW_S, 60))
    if window.total:
        for alias in sorted(window.partitions):
            share = window.share(alias)
            hot = ", ".join(f"{vb} ({n})" for vb, n in window.buckets.get(alias, [])[:3]) or "-"
            panel.rows.append([Cell(alias), Cell(f"{share:.0%}", warn=share > settings.HOTSPOT_MOVE_SUGGEST_SHARE),
                               Cell(f"{minute.partitions.get(alias, 0):,} / {window.partitions[alias]:,}"),
                               Cell(hot)])
        videos = ", ".join(f"{v} ({n:,})" for v, n in window.videos[:5])
        panel.notes.append(Cell(f"Hottest videos: {videos}.", url=None))
        suggestion = hotspots.suggest(window, busy=LEDGER.units_in_flight())
        if suggestion is not None:
            panel.alert = True
            reason = (f"Hot spot: {suggestion.source} took {suggestion.source_share:.0%} of the writes of the last "
                      f"5 minutes (over {settings.HOTSPOT_MOVE_SUGGEST_SHARE:.0%}).")
            panel.notes.append(Cell(
                f"Suggested: move buckets {suggestion.buckets_text} ({suggestion.moved_writes:,} writes) from "
                f"{suggestion.source} to {suggestion.target}. Plan it ›",
                url=admin_url("counting_migration_plan", query={"target": suggestion.target,
                                                                "buckets": suggestion.buckets_text,
                                                                "reason": reason}), warn=True))
    panel.charts.append(("skew (hottest / mean)", hist.sparkline("likes_partition_skew_ratio", window="300s",
                                                                  what="partition skew, 5-minute window")))
    panel.link = _list_link("Bucket migrations", "counting_bucketmigration_changelist")
    return panel


def _verdicts(now: dt.datetime, hist: History) -> Panel:
    panel = Panel("verdicts", "Last reconciliation verdicts",
                  ["Mode", "Run", "Verdict", "Checked", "Diffs", "Finished"],
                  empty="No reconciliation run has finished yet.")
    for mode in RunMode.values:
        run = (CheckRun.objects.filter(mode=mode, status__in=FINISHED_RUN_STATUSES)
               .order_by("-finished_at", "-id").first())
        if run is None:
            continue
        panel.rows.append([Cell(mode), Cell(f"#{run.pk}", admin_url("reconciliation_checkrun_change", run.pk)),
                           Cell(run.status, warn=run.status != "PASSED"), Cell(f"{run.checked:,}"),
                           Cell(f"{run.diffs_found} found, {run.diffs_fixed} fixed"), Cell(_ago(run.finished_at, now))])
        panel.alert = panel.alert or run.status != "PASSED"
        panel.charts.append((mode, hist.sparkline("likes_reconcile_last_run_passed", mode=mode,
                                                  what=f"{mode}: 1 passed, 0 not")))
    panel.link = _list_link("Check runs", "reconciliation_checkrun_changelist")
    return panel


def front_page(now: dt.datetime | None = None) -> dict:
    """The front page's context: the panels in order, the stored gauges' age and failed parts."""
    now = now or timezone.now()
    cur, age, errors = _current(now)
    hist = history_load(now, cur)
    panels = [
        _switches(now, hist), _outbox(cur, hist), _lag(cur, hist), _dead_letters(cur, hist), _diffs(cur, hist),
        _repairs(now, hist), _moves(now, hist), _subscriptions(cur, now, hist), _jobs(now, hist),
        _verdicts(now, hist), _hotspots(cur, hist), _retention(),
    ]
    return {"panels": panels, "gauges_age": None if age is None else _seconds(age),
            "gauges_stale": age is None or age > 3 * float(settings.METRICS_GAUGES_EVERY_S) + 30,
            "gauge_errors": errors, "history_samples": len(hist.rows)}


def switches_gauge(scrape) -> None:
    """The gauge part `console:switches` (registered by the console's AppConfig): the switches set now, by
    kind, so the front page can chart them over the last hour."""
    family = scrape.family("likes_switches_set", "Runtime switches set (paused), by kind.")
    counts: dict[str, int] = {}
    for state in switches.switches_set():
        counts[state.kind] = counts.get(state.kind, 0) + 1
    for kind in switches.switch_kinds():
        family.add(counts.get(kind, 0), kind=kind)
