"""The console's video panel (issue 14 §2, OPS-3): one video's count machinery on one page, and the links
an operator acts through (a check, a repair, the refresh switch), each behind its own permission."""

from __future__ import annotations

import html as htmllib
import re

import pytest
from django.test import Client

from counting import routing
from counting.models import CountRefreshSwitch, VideoDisplayCount
from counting.services.snapshots import count_refresh_switch_set
from likes_project.audit.services import Actor
from reconciliation.models import RepairRequest
from tests.opsconsole.test_dashboard import logged_in
from tests.reconciliation.helpers import liked_video, run_check
from tests.reconciliation.test_admin import failed_run

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]

OPERATOR = Actor(name="panel-operator", channel="admin")


def show(client: Client, video_id: str) -> str:
    response = client.get("/admin/opsconsole/video/", {"video_id": video_id})
    assert response.status_code == 200
    return response.content.decode()


def cell(page: str, ident: str) -> str:
    found = re.search(rf'id="{ident}"[^>]*>(.*?)</(td|p|ul|table)>', page, re.S)
    assert found, f"no #{ident}"
    return htmllib.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


def test_the_panel_shows_every_layer_of_a_video(make_user, make_video):
    liked_video(make_user, make_video, "panel-v", 3)
    run = run_check("identity", videos=["panel-v"])
    page = show(logged_in("panel-viewer", "likes-viewer"), "panel-v")
    assert cell(page, "video-visibility").startswith("public / active")
    assert cell(page, "count-raw") == "3" and cell(page, "count-display") == "3"
    assert cell(page, "count-risk-hidden") == "0" and cell(page, "count-policy-hidden") == "0"
    assert cell(page, "buckets-sum").startswith("3")
    gen = routing.active()
    assert f"manifest {gen.manifest_id} of generation {gen.generation}" in cell(page, "video-manifest")
    rows = re.findall(r'<tr class="video-bucket"><td>(\d+)</td><td>(cnt_\d\d)</td><td>(\d+)</td><td>(\d+)</td>'
                      r'<td>(no|FROZEN)</td>', page)
    assert sum(int(r[3]) for r in rows) == 3 and rows
    for vb, partition, epoch, _count, frozen in rows:
        assert (gen.routes[int(vb)].partition, gen.routes[int(vb)].epoch) == (partition, int(epoch))
        assert frozen == "no"
    assert f"run {run.pk}" in cell(page, "video-last-run") and "PASSED" in cell(page, "video-last-run")
    assert "generation" in cell(page, "count-cache")
    assert cell(page, "video-refresh") == "running"
    assert cell(page, "video-migrations") == "None unfinished." and cell(page, "video-diffs") == "None."
    assert 'id="video-actions"' not in page  # a viewer may act on nothing


def test_the_panel_shows_what_is_wrong_and_open(make_user, make_video):
    liked_video(make_user, make_video, "panel-w", 2)
    diff_run = failed_run("panel-w")
    repair = RepairRequest.objects.create(params={"videos": ["panel-w"]}, params_hash="0" * 64, reason="bucket drift",
                                          requested_by="someone", requested_channel="cli")
    RepairRequest.objects.create(params={"videos": ["other"]}, params_hash="1" * 64, reason="not this video",
                                 requested_by="someone", requested_channel="cli")
    count_refresh_switch_set(video_id="panel-w", paused=True, reason="investigating", actor=OPERATOR)
    VideoDisplayCount.objects.filter(video_id="panel-w").update(display_count=5)  # display != raw - hidden
    page = show(logged_in("panel-op", "likes-operator"), "panel-w")
    assert "display ≠ raw − hidden" in cell(page, "count-display")
    assert "FAILED" in cell(page, "video-last-run") and f"run {diff_run.pk}" in cell(page, "video-last-run")
    assert "buckets" in cell(page, "video-diffs")
    repairs = cell(page, "video-repairs")
    assert f"repair {repair.pk}" in repairs and "not this video" not in repairs
    assert cell(page, "video-refresh").startswith("PAUSED") and "investigating" in cell(page, "video-refresh")
    actions = dict((label, url) for url, label in re.findall(r'<a class="button" href="([^"]+)">([^<]+)</a>', page))
    assert set(actions) == {"Request a reconcile", "Request a repair", "Resume its refresh"}, actions


def test_the_panels_links_open_the_forms_filled_in(make_user, make_video):
    liked_video(make_user, make_video, "panel-l", 1)
    client = logged_in("panel-op2", "likes-operator")
    page = show(client, "panel-l")
    actions = dict((label, htmllib.unescape(url))
                   for url, label in re.findall(r'<a class="button" href="([^"]+)">([^<]+)</a>', page))
    check = client.get(actions["Request a reconcile"]).content.decode()
    assert re.search(r'<textarea name="videos"[^>]*>\s*panel-l</textarea>', check), check
    repair_form = client.get(actions["Request a repair"]).content.decode()
    assert re.search(r'<textarea name="videos"[^>]*>\s*panel-l</textarea>', repair_form)
    pause = client.get(actions["Pause its refresh"])
    assert pause.status_code == 200 and 'value="panel-l"' in pause.content.decode()
    assert not CountRefreshSwitch.objects.filter(video_id="panel-l").exists()  # opening a form changes nothing


def test_a_bad_or_unknown_video_is_an_error_on_the_form_not_a_500():
    client = logged_in("panel-viewer2", "likes-viewer")
    bad = client.get("/admin/opsconsole/video/", {"video_id": "bad id with spaces/"})
    assert bad.status_code == 200 and 'id="video-panel"' not in bad.content.decode()
    assert "errorlist" in bad.content.decode()
    unknown = show(client, "panel-nobody")
    assert "no video snapshot" in cell(unknown, "video-visibility")
    assert cell(unknown, "count-display") == "no display snapshot yet"
    assert "knows no video panel-nobody" in cell(unknown, "video-unknown")
    operator = logged_in("panel-op3", "likes-operator")  # may reconcile and repair, but not a typo
    page = show(operator, "panel-nobody")
    assert 'id="video-unknown"' in page and 'id="video-actions"' not in page


def test_the_panel_needs_a_console_role():
    response = logged_in("panel-nobody").get("/admin/opsconsole/video/", {"video_id": "x"})
    assert response.status_code == 403
