"""A real browser for the console's flows (D56): Playwright's sync API driving Debian's Chromium
(/usr/bin/chromium, which `scripts/lib.sh` installs when missing and running as root), never a browser
build of Playwright's own (`playwright install` downloads one, which cannot work here).

`debian_chromium` is one Chromium per test module (`launch` gives it a fresh, empty profile directory);
`open_page()` opens a page in a fresh context (no cookies, no cache) on pytest-django's live
server. Playwright's sync API runs an asyncio loop on the test's own thread, which makes Django refuse
ORM calls there (SynchronousOnlyOperation) although nothing async touches a connection: the module's
tests therefore run with DJANGO_ALLOW_ASYNC_UNSAFE set in this process only, for as long as the browser
is up, and restored after. The live server answers on its own threads, which have no loop.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

CHROMIUM = "/usr/bin/chromium"
# The flags that work on this machine (its notes): without the background-networking ones Chromium
# misbehaves on the closed network. `launch` adds a fresh, empty profile directory of its own.
LAUNCH_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
# How long one auto-waiting expectation or action may wait (generous: a loaded 2-core machine).
WAIT_MS = 20_000
PASSWORD = "browser-pw"  # every console user's password in the browser tests (they log in through the form)


def require_chromium() -> None:
    """Fail loudly when Debian's Chromium is missing where setup could have installed it (root); skip,
    saying how to install it, only where it could not (not root)."""
    if os.access(CHROMIUM, os.X_OK):
        return
    how = "apt-get install -y --no-install-recommends chromium (scripts/lib.sh ensure_chromium does it as root)"
    if os.geteuid() != 0:
        # Only where the setup could not install the browser (not root); as root a missing browser fails.
        pytest.skip(f"{CHROMIUM} is missing and this is not root; install it: sudo {how}")
    pytest.fail(f"{CHROMIUM} is missing although this runs as root: run ./scripts/test.sh (setup) or {how}",
                pytrace=False)


@pytest.fixture(scope="module")
def debian_chromium():
    require_chromium()
    from playwright.sync_api import sync_playwright

    saved = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    pw = sync_playwright().start()
    try:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        pw.stop()
        if saved is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = saved


@pytest.fixture
def open_page(debian_chromium, live_server):
    """`open_page()` -> a page of its own browser context (a second operator gets a second one), on the
    live server. Every context is closed at the end of the test, before the databases are flushed."""
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    contexts = []

    def make():
        context = debian_chromium.new_context(base_url=live_server.url)
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


def path_is(path: str):
    """A URL predicate for `page.wait_for_url`: this path, whatever the query (a glob such as
    "**/admin/" would also match the login page's "?next=/admin/")."""
    return lambda url: urlsplit(url).path == path


def log_in(page, username: str, password: str = PASSWORD, *, next_path: str = "/admin/") -> None:
    """Through the admin's own login form, as an operator does: open a console page, get the login
    form, submit it, land on the page."""
    page.goto(next_path)
    page.wait_for_url(path_is("/admin/login/"))
    page.locator("#id_username").fill(username)
    page.locator("#id_password").fill(password)
    page.locator("#login-form input[type=submit]").click()
    page.wait_for_url(path_is(next_path))


def page_as(open_page, username: str, password: str = PASSWORD, *, next_path: str = "/admin/"):
    """A page of its own browser context, logged in as `username` through the form, on `next_path`."""
    page = open_page()
    log_in(page, username, password, next_path=next_path)
    return page


def submit(page, label: str) -> None:
    """Press the form's submit button labelled `label`."""
    page.locator(f"input[type=submit][value='{label}']").click()


def approve_here(page, form_id: str) -> None:
    """Press the approve button of the form `form_id` on a row's change page and wait for the console to answer on
    that same page (its message and the row's new state)."""
    path = urlsplit(page.url).path
    page.locator(f"#{form_id} input[type=submit]").click()
    page.wait_for_url(path_is(path))


def submit_for_new_row(page, label: str, model, **lookup):
    """Press the submit button `label` of a form that makes a row of `model` (a plan, a request), find that row
    (the only one, or the one `lookup` selects) and wait for the console to land on its change page. Returns the
    row and the page's path."""
    submit(page, label)
    row = model.objects.get(**lookup)
    path = reverse(f"admin:{row._meta.app_label}_{row._meta.model_name}_change", args=[row.pk])
    page.wait_for_url(path_is(path))
    return row, path


def console_user(username: str, *groups: str):
    """A staff user with the password PASSWORD (they log in through the form) in the console's role groups
    `groups`, which the migrations make (put back here as the migrations' own functions make them)."""
    from tests.reconciliation.helpers import roles_ensure

    roles_ensure()
    user = get_user_model().objects.create_user(username, password=PASSWORD, is_staff=True)
    found = Group.objects.filter(name__in=groups)
    assert len(found) == len(groups), (groups, found)
    user.groups.add(*found)
    return user


def field(page, name: str):
    """The read-only value of the field `name` on an admin change page."""
    return page.locator(f".field-{name} .readonly")
