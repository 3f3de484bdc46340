"""Read-only likes set and lifted in the console, in a real browser (Debian's Chromium through Playwright, on
pytest-django's live server): an operator sets the switch with a reason, a like command is then refused with
503 `likes_read_only` and writes nothing, the operator lifts it from the list's action (with a reason again),
and the same command succeeds. The last page is saved as docs/console/read-only.png. Waits are Playwright's
auto-waiting, never a sleep."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import expect

from likes_project.audit.models import AuditRecord
from relations.models import LikeCommand, LikesReadOnlySwitch, OutboxEvent
from tests.browser import console_user, page_as, path_is
from tests.factories import ApiClientFactory, make_user, make_video, put_like
from tests.relations.helpers import assert_error, body_of, total

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

CHANGELIST = "/admin/relations/likesreadonlyswitch/"
SCREENSHOT = Path(settings.BASE_DIR) / "docs" / "console" / "read-only.png"


def test_an_operator_sets_read_only_in_the_console_a_like_is_refused_then_lifted_it_succeeds(open_page):
    ops = console_user("sw-operator", "likes-operator")
    video = make_video("sw-br-v", make_user())
    liker = make_user()
    client = ApiClientFactory().as_user(liker)
    page = page_as(open_page, ops.username, next_path=CHANGELIST)

    # set it: the add form of the switch, with a reason
    page.locator("#content-main a.addlink").click()
    page.wait_for_url(path_is(f"{CHANGELIST}add/"))
    expect(page.locator("#id_scope")).to_have_value("global")
    page.locator("#id_paused").check()
    page.locator("#id_reason").fill("failover of rel_00")
    page.locator("input[name=_save]").click()
    page.wait_for_url(path_is(CHANGELIST))
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list tbody tr").first).to_contain_text("failover of rel_00")
    assert LikesReadOnlySwitch.objects.get().paused is True

    before = (total(LikeCommand), total(OutboxEvent))
    data = assert_error(put_like(client, video.video_id, "LIKED", "sw-op-1"), 503, "likes_read_only")
    assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 0}
    assert (total(LikeCommand), total(OutboxEvent)) == before  # nothing written

    # lift it: the list's action asks for a reason first
    page.locator("#result_list tbody input.action-select").first.check()
    page.locator("select[name=action]").select_option("switches_clear")
    page.locator("button[name=index]").click()
    expect(page.locator("#content-main")).to_contain_text("1 selected")
    page.locator("textarea[name=reason]").fill("rel_00 is back")
    page.locator("#content-main input[type=submit]").click()
    page.wait_for_url(path_is(CHANGELIST))
    expect(page.locator("ul.messagelist")).to_contain_text("Cleared 1 read-only switch.")
    expect(page.locator("#result_list tbody tr").first).to_contain_text("rel_00 is back")
    expect(page.locator("#result_list tbody tr").first.locator("img[alt=False]")).to_have_count(1)
    assert LikesReadOnlySwitch.objects.get().paused is False

    resp = put_like(client, video.video_id, "LIKED", "sw-op-1")  # the same command, now accepted
    assert resp.status_code == 200, resp.content
    assert body_of(resp)["state"] == "LIKED"
    assert (total(LikeCommand), total(OutboxEvent)) == (before[0] + 1, before[1] + 1)
    records = list(AuditRecord.objects.filter(target_type="likes").order_by("id"))
    assert [(r.action, r.actor, r.channel, r.params["reason"]) for r in records] == [
        ("likes.read_only_pause", ops.username, "admin", "failover of rel_00"),
        ("likes.read_only_resume", ops.username, "admin", "rel_00 is back"),
    ]

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert re.match(rb"\x89PNG", SCREENSHOT.read_bytes()[:4])


def test_without_the_switch_permission_the_console_offers_no_way_to_set_it(open_page):
    viewer = console_user("sw-viewer", "likes-viewer")
    page = page_as(open_page, viewer.username, next_path=CHANGELIST)
    expect(page.locator("#content-main a.addlink")).to_have_count(0)
    assert page.goto(f"{CHANGELIST}add/").status == 403
    assert not LikesReadOnlySwitch.objects.exists()
