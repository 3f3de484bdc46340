"""Drill records and the §7 list (spec TEST-5, issue 33 §2): `manage.py drill --list` numbers spec §7's fifteen
drills with the drills that run each; every run leaves a `DrillRecord` (a passed or failed verdict, or the error it
broke off with), audited; `drill_records` lists them (--json, filters, bad input refused) and the console shows them
read-only. The records a real run leaves are checked by tests/test_drills.py's `run`."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from likes_project.audit.models import AuditRecord
from opsconsole.drills import DRILLS, Verdict
from opsconsole.drills.records import record_write
from opsconsole.drills.registry import SPEC_DRILLS
from opsconsole.models import DrillRecord
from tests.reconciliation.helpers import roles_ensure

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]


def run(*argv) -> str:
    out = io.StringIO()
    call_command(*argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def kept(name: str, *, failures=(), error=None) -> DrillRecord:
    verdict = None if error else Verdict(drill=name, stage="test suite", run_id="r1", failures=list(failures),
                                         notes=["a note"])
    now = timezone.now()
    return record_write(DRILLS[name], stage="test suite", started_at=now, finished_at=now, verdict=verdict,
                        error=error)


def test_the_list_numbers_the_fifteen_drills_of_section_7_and_names_every_registered_drill():
    out = run("drill", "--list")
    assert list(SPEC_DRILLS) == list(range(1, 16))
    for number in SPEC_DRILLS:
        assert f"{number:>2}. {SPEC_DRILLS[number]}" in out
    assert "13. one hot video's bucket skew" in out and "hot-video-skew" in out.split("13. ")[1].split("14. ")[0]
    for name, drill in DRILLS.items():
        assert name in out
        assert set(drill.spec_numbers) <= set(SPEC_DRILLS)


def test_a_run_is_kept_with_its_verdict_or_its_error_and_audited():
    passed = kept("hot-video-skew")
    failed = kept("worker-kill", failures=["counts differ"])
    broken = kept("worker-kill", error=RuntimeError("the worker never came back"))
    assert (passed.verdict, passed.spec_numbers, passed.open_issues) == ("PASS", [13], "note: a note")
    assert passed.actual["verdict"] == "PASS" and passed.code_version and passed.topology
    assert "every command answers 200 while one video took most of the writes" in passed.expected
    assert (failed.verdict, failed.open_issues.splitlines()[0]) == ("FAIL", "counts differ")
    assert (broken.verdict, broken.actual, broken.open_issues) == (
        "ERROR", {}, "RuntimeError: the worker never came back")
    assert sorted(AuditRecord.objects.filter(action="drill.record").values_list("outcome", flat=True)) == [
        "error", "fail", "pass"]


def test_drill_records_lists_newest_first_filters_and_refuses_a_bad_limit():
    kept("hot-video-skew")
    kept("worker-kill", failures=["counts differ"])
    records = json.loads(run("drill_records", "--json").splitlines()[-1])["records"]
    assert [r["drill"] for r in records] == ["worker-kill", "hot-video-skew"]
    assert records[0]["openIssues"] == ["counts differ", "note: a note"] and records[1]["specNumbers"] == [13]
    only = json.loads(run("drill_records", "--json", "--verdict", "PASS").splitlines()[-1])["records"]
    assert [r["drill"] for r in only] == ["hot-video-skew"]
    assert "worker-kill (§7 4)" in run("drill_records", "--drill", "worker-kill")
    assert run("drill_records", "--drill", "nothing-like-it").strip() == "no drill records"
    with pytest.raises(CommandError, match="invalid_limit"):
        run("drill_records", "--limit", "0")


def test_the_console_shows_the_records_read_only_to_a_viewer(client):
    record = kept("hot-video-skew", failures=["the skew did not fall"])
    roles_ensure()
    viewer = get_user_model().objects.create_user("drill-viewer", password="pw", is_staff=True)
    viewer.groups.add(Group.objects.get(name="likes-viewer"))
    client.force_login(viewer)
    listing = client.get(reverse("admin:opsconsole_drillrecord_changelist"))
    assert listing.status_code == 200 and b"hot-video-skew" in listing.content
    page = client.get(reverse("admin:opsconsole_drillrecord_change", args=[record.pk]))
    assert page.status_code == 200 and b"the skew did not fall" in page.content
    assert b'name="_save"' not in page.content
    assert client.get(reverse("admin:opsconsole_drillrecord_add")).status_code == 403
