"""A like traced in a real browser (issue 14 §1; the fixtures of tests/browser.py): a likes-viewer logs in
through the admin's form, traces a like by its operation id, opens the count consumer's checkpoint from
the trace (the viewer role may read checkpoints) and, back on the trace, follows the count consumer's
receipt to its page, which names the like's stream entry. The like went through the API, the real
publisher and the three consumers. The last page is saved as docs/console/trace.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from relations import routing
from relations.models import OutboxEvent
from tests.browser import console_user, page_as, path_is
from tests.counting.helpers import consume_everything, publish_all
from tests.factories import ApiClientFactory, make_user, make_video, put_like
from tests.reconciliation.helpers import LIVE_STORES

pytestmark = [pytest.mark.topology_independent, *LIVE_STORES]

TRACE_URL = "/admin/opsconsole/trace/"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "console" / "trace.png"


def test_a_viewer_traces_an_operation_and_follows_it_to_the_count_receipt(open_page):
    make_video("br-trace-v", make_user())
    liker = make_user()
    assert put_like(ApiClientFactory().as_user(liker), "br-trace-v", "LIKED", "br-trace-op").status_code == 200
    publish_all()
    consume_everything()
    row = OutboxEvent.objects.using(routing.alias_for_user(liker.pk)).get(aggregate_key=f"{liker.pk}:br-trace-v")
    looker = console_user("br-trace-viewer", "likes-viewer")

    page = page_as(open_page, looker.username, next_path=TRACE_URL)
    page.locator("#id_operation").fill("br-trace-op")
    page.locator("#trace-form input[type=submit]").click()
    count = page.locator("#consumer-count")
    expect(count.locator(".consumed")).to_have_text("yes")
    expect(page.locator(".outbox-entry")).to_contain_text(row.stream_entry_id)
    expect(page.locator(".outbox-status")).to_have_text("SENT")
    expect(page.locator("#consumer-relcache .evidence")).to_contain_text("no per-event receipt")
    trace_page = page.url

    # The checkpoint is a link to its admin page, which a viewer may read.
    count.locator("a.checkpoint-link").click()
    page.wait_for_url(lambda url: "/admin/eventlog/consumercheckpoint/" in url)
    expect(page.locator("#content")).to_contain_text("count")
    expect(page.locator(".errornote")).to_have_count(0)

    page.goto(trace_page)
    page.locator("#consumer-count a.receipt-link").click()
    page.wait_for_url(path_is("/admin/opsconsole/trace/receipt/"))
    expect(page.locator(".receipt-consumer")).to_have_text("count")
    expect(page.locator(".receipt-outcome")).to_have_text("applied")
    expect(page.locator(".receipt-entry")).to_have_text(row.stream_entry_id)
    expect(page.locator("#receipt .event-link")).to_have_text(str(row.event_id))
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
