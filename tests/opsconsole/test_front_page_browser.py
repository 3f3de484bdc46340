"""The console's front page and video panel in a real browser (D56, issue 14 §0 and §2): Debian's Chromium
on the live server over the real stores. Waits are Playwright's auto-waiting, never a sleep."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from likes_project import switches
from likes_project.audit.services import Actor
from likes_project.eventlog.models import ConsumerSwitch
from likes_project.observability import gauges_refresh
from likes_project.opsjobs.models import OpsJob
from opsconsole import dashboard
from reconciliation.models import CheckRun
from tests.browser import console_user, page_as, path_is
from tests.factories import run_jobs
from tests.reconciliation.helpers import liked_video

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"


def test_the_front_page_then_a_videos_panel_then_a_check_from_it(open_page, make_user, make_video):
    liked_video(make_user, make_video, "fp-video", 3)
    switches.pause_switch_set(ConsumerSwitch, key="reverse", paused=True, reason="reverse shard maintenance",
                              actor=Actor(name="fp-oncall", channel="admin"), action_prefix="consumer",
                              target_type="consumer")
    gauges_refresh()
    dashboard.gauge_history_sample()
    console_user("fp-operator", "likes-operator")

    page = page_as(open_page, "fp-operator")
    expect(page.locator("#panel-switches")).to_contain_text("reverse shard maintenance")
    expect(page.locator("#panel-switches")).to_contain_text("fp-oncall")
    for key in ("outbox", "lag", "dead_letters", "diffs", "repairs", "jobs", "verdicts"):
        expect(page.locator(f"#panel-{key}")).to_be_visible()
    expect(page.locator("#panel-outbox svg.spark").first).to_be_visible()  # drawn by the project, no script
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "front-page.png"), full_page=True)

    page.locator("#all-models").click()
    page.wait_for_url(path_is("/admin/models/"))
    expect(page.locator("#content-main")).to_contain_text("Reconciliation")

    page.goto("/admin/opsconsole/video/?video_id=fp-video")
    expect(page.locator("#count-display")).to_have_text("3")
    expect(page.locator("#video-buckets tr.video-bucket").first).to_be_visible()
    page.screenshot(path=str(SHOTS / "video-panel.png"), full_page=True)

    page.locator("#video-actions a", has_text="Request a reconcile").click()
    expect(page.locator("textarea[name=videos]")).to_have_value("fp-video")
    before = CheckRun.objects.count()
    page.locator("input[type=submit]").last.click()
    page.wait_for_url(re.compile(r".*/admin/opsjobs/opsjob/\d+/change/$"))  # the job's page follows the submit
    job = OpsJob.objects.get(pk=int(page.url.rstrip("/").split("/")[-2]))
    run_jobs()
    job.refresh_from_db()
    assert job.status == "SUCCEEDED", job.last_error
    run = CheckRun.objects.order_by("-id").first()
    assert CheckRun.objects.count() == before + 1 and run.scope == {"videos": ["fp-video"]}
    assert run.status == "PASSED" and run.actor == "fp-operator"
