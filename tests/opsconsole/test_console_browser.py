"""The console's flows in a real browser (D56): Debian's Chromium, driven by Playwright's sync API, on
pytest-django's live server over the real databases (default, both relation shards, both count
partitions) and Redis. Each flow checks what the operator sees and what the databases then hold.
Waits are Playwright's auto-waiting on a selector or a text, never a sleep."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django_celery_beat.models import PeriodicTask, PeriodicTasks
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect
from rest_framework.authtoken.models import Token

from likes_project.api_tokens import token_fingerprint
from likes_project.audit.models import AuditRecord
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.tasks import run_job_task
from relations import routing
from relations.models import AccountStatus
from relations.services.commands import relation_set_state
from tests.browser import PASSWORD, log_in, page_as, path_is, submit
from tests.factories import grant, make_user, make_video, run_jobs
from tests.opsconsole.helpers import liker_of_videos
from tests.reconciliation.helpers import audits
from tests.relations.helpers import relation_row

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

LOOKUP_URL = "/admin/opsconsole/auditrecord/lookup/"
TASKS_URL = "/admin/django_celery_beat/periodictask/"
TOKENS_URL = "/admin/authtoken/tokenproxy/"
ACCOUNT_DELETE_URL = "/admin/relations/account-delete/"


def operator(username: str, *perms: str):
    """A staff user with a password (they log in through the form) and only `perms`."""
    user = get_user_model().objects.create_user(username, password=PASSWORD, is_staff=True)
    grant(user, *perms)
    return user


def row_cell(page, header: str):
    """The value cell of a `<th scope=row>` row on the lookup page."""
    header_cell = page.locator("th", has_text=re.compile(f"^{header}$"))
    return page.locator("#lookup-results tr").filter(has=header_cell).locator("td")


# --- a. login form and relation lookup ------------------------------------------------------------


def test_an_operator_logs_in_and_looks_up_a_relation_made_through_the_service(open_page):
    author = make_user()
    make_video("br-vid-1", author)
    liker = make_user(shard="rel_01")  # not the first shard: the lookup must read the user's own one
    relation_set_state(user_id=liker.pk, video_id="br-vid-1", desired_state="LIKED", operation_id="br-op-1")
    looker = operator("br-looker", "opsconsole.view_relation_lookup")
    page = open_page()

    # a wrong password is refused on the form, and nobody is logged in
    page.goto(LOOKUP_URL)
    page.wait_for_url(path_is("/admin/login/"))
    page.locator("#id_username").fill(looker.username)
    page.locator("#id_password").fill("not-the-password")
    page.locator("#login-form input[type=submit]").click()
    expect(page.locator(".errornote")).to_contain_text("Please enter the correct username and password")
    assert Session.objects.count() == 0
    looker.refresh_from_db()
    assert looker.last_login is None

    log_in(page, looker.username, next_path=LOOKUP_URL)
    expect(page.locator("#user-tools")).to_contain_text(looker.username)
    looker.refresh_from_db()
    assert looker.last_login is not None and Session.objects.count() == 1
    audits_before = AuditRecord.objects.count()

    form = page.locator("#lookup-relation-form")
    form.locator("#id_relation-user").fill(liker.username)
    form.locator("#id_relation-video_id").fill("br-vid-1")
    form.locator("input[type=submit]").click()

    alias = routing.alias_for_user(liker.pk)
    assert alias == "rel_01"
    expect(page.locator("#lookup-results h2").first).to_have_text(f"Relation {liker.pk}:br-vid-1 on {alias}")
    expect(row_cell(page, "User")).to_have_text(f"{liker.pk} ({liker.username})")
    expect(row_cell(page, "Shard alias")).to_have_text(alias)
    expect(row_cell(page, "State")).to_have_text("LIKED")
    expect(row_cell(page, "Relation version")).to_have_text("1")
    expect(row_cell(page, "Last operation id")).to_have_text("br-op-1")
    assert "lookup=relation" in page.url  # a GET search ...
    # ... of what the shard holds, which it did not change (a lookup is not audited either)
    row = relation_row(liker.pk, "br-vid-1")
    assert (row.state, row.relation_version, row.last_operation_id) == ("LIKED", 1, "br-op-1")
    assert AuditRecord.objects.count() == audits_before

    # the same user and another video: no relation row, said so
    form = page.locator("#lookup-relation-form")
    form.locator("#id_relation-video_id").fill("br-vid-none")
    form.locator("input[type=submit]").click()
    expect(page.locator("#lookup-results h2").first).to_have_text(f"Relation {liker.pk}:br-vid-none on {alias}")
    expect(row_cell(page, "State")).to_contain_text("never acted on this video")


def test_without_the_lookup_permission_the_page_is_refused(open_page):
    staff = operator("br-no-lookup")
    page = page_as(open_page, staff.username)
    response = page.goto(LOOKUP_URL)
    assert response.status == 403
    expect(page.locator("#lookup-results")).to_have_count(0)


# --- b. an API token's key is shown once ----------------------------------------------------------


def test_an_issued_token_key_is_shown_once_and_never_again(open_page):
    target = make_user("br-tok-target")
    issuer = operator("br-issuer", "authtoken.view_token", "authtoken.add_token")
    page = page_as(open_page, issuer.username, next_path=TOKENS_URL)
    page.get_by_role("link", name="Add Token").click()
    page.wait_for_url(path_is(f"{TOKENS_URL}add/"))
    page.locator("#id_username").fill(target.username)
    page.locator("#id_reason").fill("browser test partner")
    submit(page, "Issue token")

    shown = page.locator("#api-token-key")
    expect(shown).to_be_visible()
    key = shown.inner_text()
    token = Token.objects.get(user=target)
    assert key == token.key and len(key) == 40
    fingerprint = token_fingerprint(key)
    expect(page.locator("#content-main")).to_contain_text(f"Issued the API token {fingerprint} of {target.username}")

    # the token list and the token's page: its fingerprint, never its key
    page.get_by_role("link", name="Back to the API tokens").click()
    page.wait_for_url(path_is(TOKENS_URL))
    expect(page.locator("#result_list")).to_contain_text(fingerprint)
    assert key not in page.content()
    page.locator("#result_list a", has_text=target.username).click()
    page.wait_for_url(path_is(f"{TOKENS_URL}{target.pk}/change/"))
    expect(page.locator(".field-fingerprint .readonly")).to_have_text(fingerprint)
    assert key not in page.content()

    # back to the page that showed it: the browser did not keep it (no-store) and will not show it
    page.go_back()
    page.wait_for_url(path_is(TOKENS_URL))
    with pytest.raises(PlaywrightError, match="ERR_CACHE_MISS"):
        page.go_back()
    expect(page.locator("body")).to_contain_text("Confirm Form Resubmission")  # Chromium's ERR_CACHE_MISS page
    assert key not in page.content()
    # reloading it posts the form again, which issues nothing: the user has a token
    page.reload()
    page.wait_for_url(path_is(f"{TOKENS_URL}add/"))
    expect(page.locator("#content-main")).to_contain_text("This user already has an API token")
    expect(page.locator("#api-token-key")).to_have_count(0)
    assert key not in page.content()

    assert list(Token.objects.values_list("key", flat=True)) == [key]
    [record] = audits("token.create")
    assert (record.actor, record.channel, record.target_id, record.outcome) == (
        "br-issuer", "admin", str(target.pk), "applied")
    assert record.params == {"username": target.username, "fingerprint": fingerprint,
                             "reason": "browser test partner"}
    assert key not in json.dumps(list(AuditRecord.objects.values()), default=str)


# --- c. disabling a periodic task, with a reason -------------------------------------------------


def enabled(*tasks) -> list[bool]:
    return [PeriodicTask.objects.get(pk=t.pk).enabled for t in tasks]


def task_row(page, name: str):
    return page.locator("#result_list tbody tr", has=page.locator("th, td", has_text=re.compile(f"^{name}$")))


def test_a_viewer_gets_no_disable_action_and_a_forged_one_changes_nothing(open_page, beat_tasks):
    sweep, publish = beat_tasks
    viewer = operator("br-beat-viewer", "django_celery_beat.view_periodictask")
    page = page_as(open_page, viewer.username, next_path=TASKS_URL)
    expect(task_row(page, "ops-jobs-sweep")).to_have_count(1)
    expect(task_row(page, "publish-outbox")).to_have_count(1)
    expect(page.locator("option[value=disable_tasks]")).to_have_count(0)
    expect(page.locator("input[name=_selected_action]")).to_have_count(0)

    # what a hand-made form on this page would post (the action, a row, a reason, the CSRF token): the
    # action does not exist for them, so the answer is the changelist again, no reason asked, nothing done
    changed_before = PeriodicTasks.last_change()
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.evaluate("""([pk]) => {
            const form = document.createElement('form');
            form.method = 'post';
            form.id = 'forged';
            const csrf = document.querySelector('input[name=csrfmiddlewaretoken]').value;  // the logout form's
            const fields = {csrfmiddlewaretoken: csrf, action: 'disable_tasks', _selected_action: pk,
                            confirm: '1', reason: 'trying anyway', index: '0'};
            for (const [name, value] of Object.entries(fields)) {
                const input = document.createElement('input');
                input.type = 'hidden'; input.name = name; input.value = value;
                form.appendChild(input);
            }
            document.body.appendChild(form);
            form.submit();
        }""", [str(sweep.pk)])
    assert answer.value.status == 200 and urlsplit(answer.value.url).path == TASKS_URL
    expect(page.locator("#forged")).to_have_count(0)  # the page is the answer now
    expect(task_row(page, "ops-jobs-sweep")).to_have_count(1)
    expect(page.locator("textarea[name=reason]")).to_have_count(0)
    expect(page.locator(".messagelist")).to_have_count(0)
    assert enabled(sweep, publish) == [True, True]
    assert audits("periodic_task.disable") == [] and AuditRecord.objects.count() == 0
    assert PeriodicTasks.last_change() == changed_before  # beat was not told of any change


def test_an_operator_disables_a_periodic_task_with_a_reason(open_page, beat_tasks):
    sweep, publish = beat_tasks
    op = operator("br-beat-operator", "django_celery_beat.view_periodictask", "django_celery_beat.change_periodictask")
    page = page_as(open_page, op.username, next_path=TASKS_URL)

    def ask_to_disable_sweep():
        task_row(page, "ops-jobs-sweep").locator("input[name=_selected_action]").check()
        page.locator("select[name=action]").select_option("disable_tasks")
        page.locator("button[name=index]").click()
        expect(page.locator("h1")).to_have_text("Disable periodic tasks")
        expect(page.locator("ul.reason-action-objects li")).to_have_count(1)
        expect(page.locator("ul.reason-action-objects li")).to_contain_text("ops-jobs-sweep")

    ask_to_disable_sweep()
    assert enabled(sweep) == [True]  # asking is not doing
    # a blank reason (spaces pass the browser's `required` check) is refused by the form
    page.locator("#id_reason").fill("   ")
    page.locator("input[type=submit][value=Disable]").click()
    expect(page.locator("#id_reason_error")).to_contain_text("This field is required.")
    assert enabled(sweep) == [True] and AuditRecord.objects.count() == 0

    page.locator("#id_reason").fill("sweeper misbehaves in the browser test")
    page.locator("input[type=submit][value=Disable]").click()
    page.wait_for_url(path_is(TASKS_URL))
    expect(page.locator(".messagelist")).to_contain_text("Disabled 1 periodic task(s).")
    expect(task_row(page, "ops-jobs-sweep").locator("td.field-enabled img")).to_have_attribute("alt", "False")
    expect(task_row(page, "publish-outbox").locator("td.field-enabled img")).to_have_attribute("alt", "True")

    assert enabled(sweep, publish) == [False, True]
    [record] = audits("periodic_task.disable")
    assert (record.actor, record.channel, record.target_type, record.target_id, record.outcome) == (
        "br-beat-operator", "admin", "periodic_task", "ops-jobs-sweep", "applied")
    assert record.params == {"task": "opsjobs.sweep", "enabled_before": True,
                             "reason": "sweeper misbehaves in the browser test"}


# --- d. account deletion and its job page ---------------------------------------------------------


def test_account_deletion_shows_its_job_progress_and_success(open_page, settings):
    doomed, videos = liker_of_videos("br-del", 6)
    settings.OPS_JOB_SLICE_S = 0  # one chunk per slice
    settings.ACCOUNT_DELETE_CHUNK = 2
    op = operator("br-deleter", "relations.change_accountstatus")
    page = page_as(open_page, op.username, next_path=ACCOUNT_DELETE_URL)

    page.locator("#id_username").fill(doomed.username)
    page.locator("#id_confirm").check()
    submit(page, "Delete account")
    page.wait_for_url(re.compile(r"/admin/opsjobs/opsjob/\d+/change/$"))
    job = OpsJob.objects.get()
    assert page.url.endswith(f"/admin/opsjobs/opsjob/{job.pk}/change/")
    status, progress = page.locator(".field-status .readonly"), page.locator(".field-progress_text .readonly")
    expect(page.locator(".field-kind .readonly")).to_have_text("account.delete")
    expect(status).to_have_text("Queued")
    expect(progress).to_contain_text("0 / ")
    # the account is hidden at once; its likes are the job's to withdraw
    assert AccountStatus.objects.get(user_id=doomed.pk).status == "deleted"
    assert all(relation_row(doomed.pk, v).state == "LIKED" for v in videos)

    run_job_task(job.pk)  # one slice, as a worker would: the page (refreshing itself) follows it
    job.refresh_from_db()
    assert (job.status, job.done, job.total) == ("RUNNING", 2, 6)
    expect(progress).to_contain_text("2 / 6")
    expect(status).to_have_text("Running")

    [finished] = run_jobs()
    assert (finished.pk, finished.status, finished.done) == (job.pk, "SUCCEEDED", 6)
    expect(status).to_have_text("Succeeded")  # on the page's own next refresh
    page.reload()  # and a finished job's page stays as it is
    expect(status).to_have_text("Succeeded")
    expect(progress).to_contain_text("6 / 6")
    expect(page.locator("meta[http-equiv=refresh]")).to_have_count(0)

    assert all(relation_row(doomed.pk, v).state == "UNLIKED" for v in videos)
    assert set(AuditRecord.objects.filter(job_id=job.pk).values_list("action", flat=True)) == {
        "job.start", "account.delete", "account.delete.withdrawn", "job.finish"}
