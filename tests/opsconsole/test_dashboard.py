"""The console's front page (issue 14 §0): what an operator sees without clicking, from `default` only,
and the last hour of the stored gauges as inline SVG charts."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from likes_project import switches
from likes_project.audit.services import Actor
from likes_project.eventlog.models import ConsumerSwitch, DeadLetter, GaugeSnapshot
from likes_project.observability import SNAPSHOT_KEY, gauges_refresh
from likes_project.opsjobs.models import JobStatus, OpsJob
from opsconsole import dashboard
from opsconsole.models import GaugeSample
from reconciliation.models import RepairRequest
from relations.models import OutboxEvent
from tests.counting.helpers import drain
from tests.reconciliation.helpers import roles_ensure
from tests.reconciliation.test_admin import failed_run
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

OPERATOR = Actor(name="dash-operator", channel="admin")
PANELS = ("switches", "outbox", "lag", "dead_letters", "diffs", "repairs", "moves", "subscriptions", "jobs",
          "verdicts", "hotspots", "retention")


def logged_in(username: str, *groups: str) -> Client:
    roles_ensure()
    user = get_user_model().objects.create_user(username, password="pw", is_staff=True)
    user.groups.add(*Group.objects.filter(name__in=groups))
    assert user.groups.count() == len(groups)
    client = Client()
    client.force_login(user)
    return client


def panel(html: str, key: str) -> str:
    found = re.search(rf'<section class="dash-panel[^"]*" id="panel-{key}">(.*?)</section>', html, re.S)
    assert found, f"no panel {key}"
    return found.group(1)


def front(client: Client) -> str:
    response = client.get("/admin/")
    assert response.status_code == 200
    return response.content.decode()


def test_an_idle_service_shows_every_panel_and_the_models_one_click_away():
    client = logged_in("dash-viewer", "likes-viewer")
    html = front(client)
    for key in PANELS:
        panel(html, key)
    assert "No switch is set" in panel(html, "switches")
    assert "No repair is waiting for approval." in panel(html, "repairs")
    assert "not computed yet" in html  # no gauges stored yet: the page says so, it does not invent zeros
    assert 'href="/admin/models/"' in html
    models = client.get("/admin/models/")
    assert models.status_code == 200 and "All models and pages" in models.content.decode()
    assert 'href="/admin/reconciliation/' in models.content.decode()


def test_a_staff_user_without_a_role_sees_no_health():
    html = front(logged_in("dash-nobody"))
    assert 'id="panel-' not in html and "opsconsole.view_dashboard" in html
    assert 'href="/admin/models/"' in html  # counter-example of the viewer: only the link


def test_the_front_page_shows_what_is_set_pending_and_running(make_user, make_video):
    video = make_video("dash-v", make_user())
    cmd(make_user(), video.video_id, "LIKED")
    drain()  # published and consumed: every consumer has its checkpoints
    cmd(make_user(), video.video_id, "LIKED")  # committed, not published: one unpublished outbox row
    switches.pause_switch_set(ConsumerSwitch, key="count", paused=True, reason="incident 42", actor=OPERATOR,
                              action_prefix="consumer", target_type="consumer")
    job = OpsJob.objects.create(kind="tests.dash", actor="dash-operator", channel="cli", status=JobStatus.RUNNING,
                                target="video dash-v", done=50, total=200, unit="rows", message="copying")
    repair = RepairRequest.objects.create(params={"videos": ["dash-v"]}, params_hash="0" * 64, reason="drift seen",
                                          requested_by="dash-operator", requested_channel="cli")
    run = failed_run("dash-v")  # an identity run that FAILED with one open diff on the buckets layer
    now = timezone.now()
    DeadLetter.objects.create(consumer="count", stream_key="s", entry_id="1-0", error_class="ValueError",
                              first_failed_at=now, last_failed_at=now)
    gauges_refresh()

    # What the outbox holds unpublished now (the first like's row too, when a transaction left open
    # elsewhere on its shard holds the publisher's commit-order watermark back): the panel must say so.
    pending = {alias: OutboxEvent.objects.using(alias).filter(status__in=dashboard.PENDING_OUTBOX).count()
               for alias in settings.RELATION_SHARD_ALIASES}
    assert sum(pending.values()) >= 1
    html = front(logged_in("dash-op", "likes-operator"))
    switches_panel = panel(html, "switches")
    assert "incident 42" in switches_panel and "dash-operator" in switches_panel and "count" in switches_panel
    outbox = panel(html, "outbox")
    for alias, n in pending.items():  # every shard, idle ones too, with its unpublished rows
        assert re.search(rf"<td>{alias}</td><td[^>]*>\d+ s</td><td>{n}</td>", outbox), (alias, n, outbox)
    assert "<td>count</td>" in panel(html, "lag")
    dead = panel(html, "dead_letters")
    assert re.search(r'<td>count</td><td class="warn">1</td>', dead), dead
    assert re.search(r'<td>buckets</td><td class="warn">1</td>', panel(html, "diffs"))
    repairs = panel(html, "repairs")
    assert f'/admin/reconciliation/repairrequest/{repair.pk}/change/' in repairs and "drift seen" in repairs
    jobs = panel(html, "jobs")
    assert f"/admin/opsjobs/opsjob/{job.pk}/change/" in jobs and "50 / 200 rows (25%)" in jobs and "copying" in jobs
    verdicts = panel(html, "verdicts")
    assert f"/admin/reconciliation/checkrun/{run.pk}/change/" in verdicts
    assert re.search(r'<td>identity</td>.*?<td class="warn">FAILED</td>', verdicts, re.S), verdicts
    for key in ("switches", "dead_letters", "diffs", "repairs", "verdicts"):
        assert f'class="dash-panel alert" id="panel-{key}"' in html, key  # each needs an operator
    assert 'class="dash-panel" id="panel-jobs"' in html  # a running job is not an alert


def test_moves_not_finished_are_listed_and_one_waiting_or_stuck_is_an_alert():
    """The ledger kit's gauges and the front page's moves panel: a slot move waiting for a second person is an
    alert; approved with its job queued it is under way (no alert); its job dead, it is stuck (an alert)."""
    from likes_project.observability import scrape_families
    from relations import routing
    from relations.services.slot_moves import ledger
    from tests.reconciliation.helpers import APPROVER, REQUESTER

    client = logged_in("dash-moves", "likes-viewer")
    assert "No move is under way." in panel(front(client), "moves")
    slots = [s for s in range(256) if routing.active_contract().slot_aliases[s] == "rel_00"][:2]
    m = ledger.move_plan(slots=slots, target="rel_01", reason="scale out", actor=REQUESTER)
    gauges_refresh()
    families = {name: samples for name, _help, samples in scrape_families()}
    assert ({"ledger": "relation_slot_move", "state": "AWAITING_APPROVAL"}, 1) in families["likes_ledgers_unfinished"]
    assert any(labels == {"ledger": "relation_slot_move", "state": "AWAITING_APPROVAL"}
               for labels, _age in families["likes_ledger_state_age_seconds"])
    html = front(client)
    moves = panel(html, "moves")
    label = ",".join(map(str, slots))
    assert f"/admin/relations/relationslotmove/{m.pk}/change/" in moves
    assert f"slots {label} (2) rel_00 -&gt; rel_01" in moves and '<td class="warn">AWAITING_APPROVAL</td>' in moves
    assert 'class="dash-panel alert" id="panel-moves"' in html  # it needs a second person
    m = ledger.move_approve(move_id=m.pk, actor=APPROVER)
    assert 'class="dash-panel" id="panel-moves"' in front(client)  # under way: its job is queued
    OpsJob.objects.filter(pk=m.job_id).update(status=JobStatus.FAILED)  # its worker died; nothing runs it now
    html = front(client)
    assert 'class="dash-panel alert" id="panel-moves"' in html
    assert '<td class="warn">PREPARE</td>' in panel(html, "moves")
    ledger.move_abort(move_id=m.pk, actor=APPROVER, reason="test")
    gauges_refresh()
    families = {name: samples for name, _help, samples in scrape_families()}
    assert not families.get("likes_ledgers_unfinished") and "No move is under way." in panel(front(client), "moves")


def test_a_subscription_behind_its_retention_or_lagging_is_an_alert(make_user, make_video):
    """Issue 31 §1: the front page lists a subscription that fell behind its retention, or lags past its alert
    threshold, as an alert; one that keeps up is not listed."""
    from likes_project.subscriptions import services
    from likes_project.subscriptions.models import Subscription

    client = logged_in("dash-subs", "likes-viewer")
    for name in ("keeps-up", "falls-behind"):
        services.subscription_create(name=name, owner="recsys", purpose="tests", fields=["videoId"],
                                     start_from="latest", actor=OPERATOR)
    assert "No subscription is lagging." in panel(front(client), "subscriptions")
    make_video("dash-sub-v", make_user())
    cmd(make_user(), "dash-sub-v", "LIKED")
    drain()  # published: both subscriptions have an event to read
    Subscription.objects.filter(name="falls-behind").update(max_lag_s=0.0, alert_lag_s=0.0)
    assert services.subscriptions_lag_check().behind == ["falls-behind"]
    gauges_refresh()
    html = front(client)
    listed = panel(html, "subscriptions")
    assert "falls-behind" in listed and '<td class="warn">BEHIND_RETENTION</td>' in listed
    assert "keeps-up" not in listed
    assert 'class="dash-panel alert" id="panel-subscriptions"' in html


def test_the_page_reads_default_only(make_user, make_video):
    """Whatever the outbox and the streams hold, opening the console reads one database: the stored gauges
    stand for the shards, the partitions and Redis (which may be down when the page is needed)."""
    cmd(make_user(), make_video("dash-q", make_user()).video_id, "LIKED")
    gauges_refresh()
    others = [alias for alias in connections if alias != "default"]
    contexts = [CaptureQueriesContext(connections[alias]) for alias in others]
    for ctx in contexts:
        ctx.__enter__()
    try:
        context = dashboard.front_page()
    finally:
        for ctx in contexts:
            ctx.__exit__(None, None, None)
    assert len(context["panels"]) == len(PANELS)
    touched = {alias: len(ctx.captured_queries) for alias, ctx in zip(others, contexts, strict=True)
               if ctx.captured_queries}
    assert touched == {}, touched


def _snapshot_at(at: dt.datetime) -> None:
    gauges_refresh()
    GaugeSnapshot.objects.filter(key=SNAPSHOT_KEY).update(computed_at=at)


def test_the_history_keeps_one_sample_per_snapshot_and_prunes_the_old(make_user, make_video):
    now = timezone.now()
    _snapshot_at(now - dt.timedelta(hours=3))
    assert dashboard.gauge_history_sample(now=now) is True
    assert GaugeSample.objects.count() == 0  # older than CONSOLE_HISTORY_KEEP_S (2 h): pruned at once
    _snapshot_at(now - dt.timedelta(minutes=30))
    assert dashboard.gauge_history_sample(now=now) is True
    assert dashboard.gauge_history_sample(now=now) is False  # the same snapshot again: not copied twice
    assert GaugeSample.objects.count() == 1
    sample = GaugeSample.objects.get()
    assert set(sample.values) <= set(dashboard.CHARTED) and "likes_outbox_oldest_pending_age_seconds" in sample.values
    assert "likes_stream_length" not in sample.values  # not charted: not kept


def test_the_charts_draw_the_last_hour(make_user, make_video):
    video = make_video("dash-c", make_user())
    now = timezone.now()
    _snapshot_at(now - dt.timedelta(minutes=40))
    dashboard.gauge_history_sample(now=now)
    cmd(make_user(), video.video_id, "LIKED")
    cmd(make_user(), video.video_id, "LIKED")
    _snapshot_at(now - dt.timedelta(minutes=10))
    dashboard.gauge_history_sample(now=now)
    _snapshot_at(now - dt.timedelta(minutes=90))  # an old snapshot: in the history window? no
    dashboard.gauge_history_sample(now=now)
    hist = dashboard.history_load(now)
    assert len(hist.rows) == 2  # the one 90 minutes old is kept (2 h) but is not in the last hour
    assert [v for _at, v in hist.series("likes_outbox_rows", status=dashboard.PENDING_OUTBOX)] == [0.0, 2.0]
    html = front(logged_in("dash-chart", "likes-viewer"))
    outbox = panel(html, "outbox")
    charts = re.findall(r'<svg class="spark"[^>]*aria-label="([^"]+)"><title>[^<]*</title>.*?'
                        r'<polyline [^>]*points="([^"]+)"', outbox, re.S)
    assert charts, outbox
    points = [pts.split() for _label, pts in charts]
    # The two samples of the last hour, and the stored gauges the table shows as the newest point (issue 32 §3: a
    # chart no longer ends a minute before its table).
    assert len(charts) == len(settings.RELATION_SHARD_ALIASES) and all(len(p) == 3 for p in points), points
    rows_now = dashboard.history_load(now, {"likes_outbox_rows": [({"shard": "rel_00", "status": "NEW"}, 7.0)]})
    assert rows_now.series("likes_outbox_rows", status=dashboard.PENDING_OUTBOX)[-1] == (now, 7.0)


def test_a_chart_without_history_says_so():
    start = timezone.now() - dashboard.WINDOW
    assert "no history" in dashboard.sparkline([], start=start, end=timezone.now(), what="x")
    svg = dashboard.sparkline([(start, 0.0), (timezone.now(), 5.0)], start=start, end=timezone.now(), what="lag")
    assert "min 0, max 5, now 5" in svg and 'points="30.0,32.0 156.0,4.0"' in svg  # start bottom-left, end top-right
    # The scale is written on the chart: its top and 0 on the left, the current value beside the last point.
    assert re.search(r'<text class="spark-scale"[^>]*>5</text><text class="spark-scale"[^>]*>0</text>', svg), svg
    assert re.search(r'<text class="spark-now"[^>]*>5</text>', svg), svg


def test_the_hot_spot_panel_suggests_a_move_that_opens_the_plan_form_filled_in(make_user, make_video, settings):
    """Issue 32 §2: the partitions' shares and hottest buckets from the stored gauges; past the share, the suggested
    move is one click from the migration's plan form, filled in, and nothing is planned until it is submitted. Under
    the share there is no suggestion and no alert."""
    from counting import hotspots
    from counting.models import BucketMigration

    author = make_user()
    make_video("dash-hot", author)
    for _ in range(30):
        cmd(make_user(), "dash-hot", "LIKED")
    drain()
    settings.HOTSPOT_MIN_WRITES = 10
    gauges_refresh()
    window = hotspots.read(hotspots.SUGGEST_WINDOW_S)
    source = max(window.partitions, key=lambda a: (window.partitions[a], a))
    settings.HOTSPOT_MOVE_SUGGEST_SHARE = window.share(source) + 0.01  # the counter-example: under the share
    client = logged_in("dash-hot-op", "likes-operator")
    calm_page = front(client)
    calm = panel(calm_page, "hotspots")
    assert "cnt_00" in calm and "cnt_01" in calm and "Hottest videos: dash-hot (30)" in calm
    assert "Suggested" not in calm and 'class="dash-panel" id="panel-hotspots"' in calm_page

    settings.HOTSPOT_MOVE_SUGGEST_SHARE = window.share(source) - 0.01
    html = front(client)
    hot = panel(html, "hotspots")
    assert 'class="dash-panel alert" id="panel-hotspots"' in html
    found = re.search(r'<a href="([^"]+)">Suggested: move buckets ([0-9,]+) \(\d+ writes\) from (\w+) to (\w+)', hot)
    assert found, hot
    url, buckets, src, target = found.groups()
    assert (src, target) == (source, "cnt_02")
    form = client.get(url.replace("&amp;", "&"))
    assert form.status_code == 200
    page = form.content.decode()
    assert re.search(r'<option value="cnt_02"[^>]* selected>', page), page
    assert f'value="{buckets}"' in page and "Hot spot: " in page
    assert BucketMigration.objects.count() == 0  # opening the form plans nothing
