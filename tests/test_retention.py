"""Retention rules (issue 31 §4, PRIV-3): the relations app's rules delete only what is past their window and
never the evidence of a relation's current version (its command row, its archived event), so reconciliation
still finds it; the runner audits a sweep that deleted something and not an idle run of the system, counts it and
measures what is left; the command refuses an unknown rule; the settings check refuses a tombstone window shorter
than the longest delivery delay; the console page needs its permission."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import io
import json

import pytest
from django.conf import settings
from django.contrib import admin
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import path
from django.utils import timezone

from likes_project import leases, metrics
from likes_project.audit.models import AuditRecord
from likes_project.audit.services import system_actor
from likes_project.eventlog.models import GaugeSnapshot
from likes_project.observability import gauges_refresh, scrape_families
from likes_project.retention import (
    RETENTION_RUN_PERMISSION,
    retention_rules,
    retention_status,
    retention_sweep,
    retention_sweep_task,
)
from likes_project.retention_console import RETENTION_PAGE
from opsconsole import dashboard
from reconciliation.services.evidence import outbox_evidence
from relations import routing
from relations.checks import TOMBSTONE_WINDOW_ID, tombstone_retention_check
from relations.models import LikeCommand, OutboxArchive, OutboxEvent
from tests.counting.helpers import drain
from tests.factories import TEST_ACTOR, grant, make_user, make_video, staff_client
from tests.reconciliation.helpers import run_check
from tests.relations.helpers import cmd, relation_row

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

PAST = dt.timedelta(days=settings.COMMAND_RETENTION_DAYS + 1)  # both windows are 180 days by default
INSIDE = dt.timedelta(days=settings.COMMAND_RETENTION_DAYS - 1)
VIDEOS = ("rt-cur", "rt-flip", "rt-recent")

# The console page as the console mounts an app-level AdminPage (`opsconsole.sites`), for the page's tests.
urlpatterns = [
    path("admin/opsconsole/retention/",
         admin.site.admin_view(functools.partial(RETENTION_PAGE.view, admin_site=admin.site)), name="retention_page"),
    path("admin/", admin.site.urls),
]
PAGE = "/admin/opsconsole/retention/"


def ops(user) -> set[str]:
    return set(LikeCommand.objects.using(routing.alias_for_user(user.pk)).filter(user_id=user.pk)
               .values_list("operation_id", flat=True))


def archived(user) -> set[tuple[str, int]]:
    rows = OutboxArchive.objects.using(routing.alias_for_user(user.pk)).filter(aggregate_key__startswith=f"{user.pk}:")
    return {(key.split(":", 1)[1], v) for key, v in rows.values_list("aggregate_key", "relation_version")}


def age_command(user, key: str, by: dt.timedelta) -> None:
    LikeCommand.objects.using(routing.alias_for_user(user.pk)).filter(user_id=user.pk, operation_id=key).update(
        created_at=timezone.now() - by)


def archive_everything(published: dict[str, dt.timedelta]) -> None:
    """What the outbox archiver does once every consumer has the events (OUT-7), with publication times set by
    video: every outbox row moves to the archive of its shard."""
    now = timezone.now()
    for alias in routing.all_aliases():
        rows = list(OutboxEvent.objects.using(alias).all())
        OutboxArchive.objects.using(alias).bulk_create([OutboxArchive(
            id=r.id, event_id=r.event_id, aggregate_key=r.aggregate_key, relation_version=r.relation_version,
            event_type=r.event_type, schema_version=r.schema_version, payload=r.payload, stream_key=r.stream_key,
            stream_entry_id=r.stream_entry_id, created_at=r.created_at,
            published_at=now - published[r.aggregate_key.split(":", 1)[1]], archived_at=now) for r in rows])
        OutboxEvent.objects.using(alias).filter(id__in=[r.id for r in rows]).delete()


@pytest.fixture
def history():
    """On both shards a user with: an old like that is still the relation's version (the counter-example: older
    than the window, kept as evidence), an old like / unlike / like (the first two superseded, past the window),
    a recent like / unlike (the like superseded but inside the window), and an old repeated like (no-op)."""
    author = make_user()
    for v in VIDEOS:
        make_video(v, author)
    users = [make_user(shard=alias) for alias in routing.all_aliases()]
    for u in users:
        p = f"u{u.pk}"
        steps = [("rt-cur", "LIKED", "cur-like", PAST), ("rt-cur", "LIKED", "cur-again", PAST),
                 ("rt-flip", "LIKED", "flip-1", PAST), ("rt-flip", "UNLIKED", "flip-2", PAST),
                 ("rt-flip", "LIKED", "flip-3", PAST),
                 ("rt-recent", "LIKED", "recent-1", INSIDE), ("rt-recent", "UNLIKED", "recent-2", INSIDE)]
        for video, state, key, old in steps:
            cmd(u, video, state, key=f"{p}-{key}")
            age_command(u, f"{p}-{key}", old)
    drain()  # published and projected: the count projection holds every current version
    archive_everything({"rt-cur": PAST, "rt-flip": PAST, "rt-recent": INSIDE})
    return users


def audits(rule: str):
    return AuditRecord.objects.filter(action="retention.sweep", target_id=rule)


def test_the_command_rule_deletes_only_superseded_rows_past_the_window(history):
    before = metrics.value("likes_retention_deleted_total", rule="commands")
    report = retention_sweep(actor=TEST_ACTOR, rules=["commands"])
    [run] = report.rules
    assert (run.rule, run.deleted, run.status, run.finished) == ("commands", 2 * len(history), "ok", True)
    for u in history:
        p = f"u{u.pk}"
        # flip-1 and flip-2 went; cur-like, as old, is the relation's version: its evidence stays. The no-op row is
        # not this rule's, and the superseded recent-1 is inside the window.
        assert ops(u) == {f"{p}-cur-like", f"{p}-cur-again", f"{p}-flip-3", f"{p}-recent-1", f"{p}-recent-2"}
        assert relation_row(u.pk, "rt-flip").relation_version == 3
    assert metrics.value("likes_retention_deleted_total", rule="commands") - before == 2 * len(history)
    [record] = audits("commands")
    assert (record.actor, record.channel, record.outcome) == ("tests", "cli", "applied")
    assert record.params["deleted"] == 2 * len(history) and record.params["finished"] is True
    assert record.params["window"] == "180 days" and record.params["cutoff"]
    assert retention_sweep(actor=TEST_ACTOR, rules=["commands"]).deleted == 0  # idempotent


@pytest.mark.django_db(databases="__all__", transaction=True)  # its exact check holds a cut over other connections
def test_the_archive_rule_keeps_each_current_version_and_reconciliation_still_passes(history):
    run = retention_sweep(actor=TEST_ACTOR, rules=["outbox-archive"]).rules[0]
    assert (run.deleted, run.status) == (2 * len(history), "ok")
    for u in history:
        assert archived(u) == {("rt-cur", 1), ("rt-flip", 3), ("rt-recent", 1), ("rt-recent", 2)}
    retention_sweep(actor=TEST_ACTOR, rules=["commands", "noop-commands"])
    # What reconciliation reads as the evidence of a version is still there for every current relation.
    keys = [(u.pk, v, relation_row(u.pk, v).relation_version) for u in history for v in VIDEOS]
    found = outbox_evidence(keys)
    assert set(found) == set(keys) and {f["status"] for f in found.values()} == {"ARCHIVED"}
    for mode in ("coverage", "exact"):
        assert run_check(mode, videos=list(VIDEOS)).status == "PASSED"


def test_the_noop_rule_is_cmd15s_retention(history):
    run = retention_sweep(actor=TEST_ACTOR, rules=["noop-commands"]).rules[0]
    assert run.deleted == len(history)  # each user's old repeated like
    assert all(f"u{u.pk}-cur-again" not in ops(u) and f"u{u.pk}-cur-like" in ops(u) for u in history)


def test_a_bounded_run_stops_unfinished_the_next_goes_on_and_a_held_lease_skips_the_rule(history):
    n = 2 * len(history)
    with override_settings(RETENTION_BATCH=1):  # one row a batch: the run's position on each shard matters
        first = retention_sweep(actor=TEST_ACTOR, rules=["commands"], max_batches=1).rules[0]
        assert (first.deleted, first.batches, first.finished) == (1, 1, False)
        rest = retention_sweep(actor=TEST_ACTOR, rules=["commands"]).rules[0]
        assert (rest.deleted, rest.batches, rest.finished) == (n - 1, n, True)  # the last batch found nothing
    assert all(f"u{u.pk}-cur-like" in ops(u) and f"u{u.pk}-flip-2" not in ops(u) for u in history)
    leases.lease_acquire(resource="retention:noop-commands", holder="another-run", ttl_s=60)
    busy = retention_sweep(actor=TEST_ACTOR, rules=["noop-commands"]).rules[0]
    assert (busy.status, busy.deleted) == ("busy", 0) and not audits("noop-commands").exists()


def test_an_idle_system_run_is_not_audited_one_that_deleted_is_and_what_is_left_is_measured(history):
    system = system_actor("retention")
    assert retention_sweep(actor=system, rules=["commands"]).deleted == 2 * len(history)
    assert audits("commands").get().channel == "system"
    assert retention_sweep(actor=system, rules=["commands"]).deleted == 0
    assert audits("commands").count() == 1  # the idle run left no row
    # Measured after each sweep: the oldest command row it may still delete is the recent, superseded like.
    [status] = retention_status(rules=["commands"])
    assert status.measured_at is not None and not status.due
    assert INSIDE - dt.timedelta(hours=1) < dt.timedelta(seconds=status.age_s) < INSIDE + dt.timedelta(hours=1)
    assert GaugeSnapshot.objects.filter(key="retention:commands").exists()
    gauges_refresh()
    gauges = {name: samples for name, _help, samples in scrape_families()}
    assert ({"rule": "commands"}, settings.COMMAND_RETENTION_DAYS * 86400) in gauges["likes_retention_window_seconds"]
    [(_labels, age)] = [s for s in gauges["likes_retention_oldest_age_seconds"] if s[0] == {"rule": "commands"}]
    assert abs(age - status.age_s) < 120


def test_the_beat_task_runs_every_rule_bounded(history):
    assert retention_sweep_task.name == "retention.sweep"
    assert settings.CELERY_BEAT_SCHEDULE["retention-sweep"]["task"] == "retention.sweep"
    result = retention_sweep_task()
    by_rule = {r["rule"]: r for r in result["rules"]}
    assert set(by_rule) == {r.name for r in retention_rules()}
    assert by_rule["commands"]["deleted"] == 2 * len(history) and by_rule["outbox-archive"]["status"] == "ok"


def test_the_command_refuses_an_unknown_rule_and_deletes_nothing(history):
    rows = {u.pk: ops(u) for u in history}
    out = io.StringIO()
    with pytest.raises(CommandError, match="unknown_retention_rule: Unknown retention rule 'comands'"):
        call_command("retention_sweep", "--rule", "commands", "--rule", "comands", "--json", stdout=out,
                     stderr=io.StringIO())
    assert json.loads(out.getvalue())["code"] == "unknown_retention_rule"
    assert {u.pk: ops(u) for u in history} == rows and not AuditRecord.objects.filter(action="retention.sweep")


def test_the_command_shows_the_status_then_sweeps_with_progress(history):
    out = io.StringIO()
    call_command("retention_sweep", "--status", "--rule", "commands", "--json", stdout=out)
    [row] = json.loads(out.getvalue())["rules"]
    assert (row["rule"], row["setting"], row["due"]) == ("commands", "COMMAND_RETENTION_DAYS", True)
    assert not AuditRecord.objects.filter(action="retention.sweep")  # a status deletes nothing
    out, err = io.StringIO(), io.StringIO()
    call_command("retention_sweep", "--rule", "commands", stdout=out, stderr=err)
    assert f"commands: deleted {2 * len(history)} past 180 days (ok)" in out.getvalue()
    assert f"commands: {2 * len(history)} deleted so far" in err.getvalue()


def test_with_nothing_kept_every_relations_rule_says_so():
    rows = retention_status(rules=["commands", "outbox-archive", "noop-commands"], live=True)
    assert [(s.oldest, s.due, s.age_text) for s in rows] == [(None, False, "nothing kept")] * 3


def test_the_settings_check_refuses_a_tombstone_window_within_the_delivery_delay():
    assert tombstone_retention_check() == []  # the defaults: 90 days against 72 h + 24 h
    delay_days = (settings.OUTBOX_RETENTION_HOURS * 3600 + settings.SUBSCRIPTION_MAX_LAG_S) / 86400
    with override_settings(TOMBSTONE_RETENTION_DAYS=delay_days):  # equal is not longer
        [error] = tombstone_retention_check()
    assert error.id == TOMBSTONE_WINDOW_ID and error.is_serious()
    assert "TOMBSTONE_RETENTION_DAYS" in error.msg and "SUBSCRIPTION_MAX_LAG_S" in error.msg
    with override_settings(TOMBSTONE_RETENTION_DAYS=delay_days + 0.01):
        assert tombstone_retention_check() == []


@pytest.mark.urls(__name__)
def test_the_console_page_needs_its_permission_and_runs_one_audited_sweep(history):
    assert Client().get(PAGE).status_code == 302  # to the login page
    user, client = staff_client("rt-operator")
    assert client.get(PAGE).status_code == 403
    grant(user, RETENTION_RUN_PERMISSION)
    page = client.get(PAGE)
    assert page.status_code == 200
    assert all(r.name.encode() in page.content for r in retention_rules())
    done = client.post(PAGE, {"rule": "commands", "confirm": "on"}, follow=True)
    assert f"ommands: deleted {2 * len(history)} past 180 days".encode() in done.content  # the admin capitalises
    assert audits("commands").get().actor == "rt-operator"
    assert all(f"u{u.pk}-flip-1" not in ops(u) for u in history)


def test_the_front_page_has_a_retention_line(history):
    retention_sweep(actor=TEST_ACTOR, rules=["commands"])
    shards = [CaptureQueriesContext(connections[alias]) for alias in routing.all_aliases()]
    with contextlib.ExitStack() as stack:
        for ctx in shards:
            stack.enter_context(ctx)
        panel = next(p for p in dashboard.front_page()["panels"] if p.key == "retention")
    assert not any(ctx.captured_queries for ctx in shards)  # the line reads the stored measurements on default
    rows = {row[0].text: row for row in panel.rows}
    assert set(rows) == {r.name for r in retention_rules()}
    assert rows["commands"][1].text == "180 days" and rows["commands"][3].text != "not yet"
