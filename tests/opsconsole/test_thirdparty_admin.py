"""The console's admin for django-celery-beat and DRF tokens (issue 10, D48): their own ModelAdmins are
replaced. Periodic tasks are read-only except enable / disable / run now, which need the change
permission and a reason and are audited; tokens never show their key, are issued (shown once) and
revoked behind their own permissions, audited."""

from __future__ import annotations

import json

import pytest
from django.contrib import admin
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse
from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks
from django_celery_beat.schedulers import ModelEntry
from rest_framework.authtoken.models import Token, TokenProxy
from rest_framework.test import APIClient

from likes_project.api_tokens import token_fingerprint
from likes_project.audit.models import AuditRecord
from opsconsole.admin import ApiTokenAdmin, PeriodicTaskAdmin
from tests.factories import grant, make_user, staff_client
from tests.reconciliation.helpers import audits

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

TASKS_URL = "/admin/django_celery_beat/periodictask/"
TOKENS_URL = "/admin/authtoken/tokenproxy/"
SWEEP_QUEUE = "maintenance"  # where CELERY_TASK_ROUTES sends opsjobs.sweep


def test_our_admins_replace_the_packages_own():
    assert isinstance(admin.site.get_model_admin(PeriodicTask), PeriodicTaskAdmin)
    assert isinstance(admin.site.get_model_admin(TokenProxy), ApiTokenAdmin)
    assert not admin.site.is_registered(Token)


# --- Celery beat ---------------------------------------------------------------------------------


def act(client, action: str, tasks, reason: str | None = None):
    data = {"action": action, "_selected_action": [t.pk for t in tasks]}
    if reason is not None:
        data.update(confirm="1", reason=reason)
    return client.post(TASKS_URL, data)


def enabled(*tasks) -> list[bool]:
    return [PeriodicTask.objects.get(pk=t.pk).enabled for t in tasks]


@pytest.fixture
def broker_queue():
    """The broker's queue the sweep task is routed to, emptied on the way in and out; yields a function
    returning (task name, periodic task header) of each message queued."""
    from likes_project.celery import app

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        channel.queue_purge(SWEEP_QUEUE)

        def queued() -> list[tuple[str, str]]:
            out = []
            for raw in channel.client.lrange(SWEEP_QUEUE, 0, -1):
                headers = json.loads(raw)["headers"]
                out.append((headers["task"], headers.get("periodic_task_name")))
            return out

        try:
            yield queued
        finally:
            channel.queue_purge(SWEEP_QUEUE)


def test_view_permission_alone_cannot_enable_disable_or_run_a_task(beat_tasks, broker_queue):
    sweep, publish = beat_tasks
    viewer, client = staff_client("beat-viewer")
    grant(viewer, "django_celery_beat.view_periodictask")
    listing = client.get(TASKS_URL)
    assert listing.status_code == 200 and listing.context["cl"].result_count == 2
    page = listing.content.decode()
    assert not any(name in page for name in ("enable_tasks", "disable_tasks", "run_tasks_now", "toggle_tasks"))
    changed_before = PeriodicTasks.last_change()

    for action in ("disable_tasks", "run_tasks_now", "toggle_tasks", "delete_selected"):
        for reason in (None, "trying anyway"):
            resp = act(client, action, [sweep, publish], reason)
            # the action does not exist for them: the changelist again, no reason form, nothing done
            assert resp.status_code == 200 and 'name="reason"' not in resp.content.decode(), action
    assert enabled(sweep, publish) == [True, True]
    assert AuditRecord.objects.count() == 0 and broker_queue() == []
    assert PeriodicTasks.last_change() == changed_before

    change_url = reverse("admin:django_celery_beat_periodictask_change", args=[sweep.pk])
    assert client.get(change_url).status_code == 200  # view only
    assert client.post(change_url, {"name": sweep.name, "task": "x", "enabled": ""}).status_code == 403
    assert client.post(reverse("admin:django_celery_beat_periodictask_delete", args=[sweep.pk]),
                       {"post": "yes"}).status_code == 403
    assert client.get(reverse("admin:django_celery_beat_periodictask_add")).status_code == 403
    assert PeriodicTask.objects.get(pk=sweep.pk).task == "opsjobs.sweep"


def test_change_permission_disables_and_enables_with_a_reason_audited(beat_tasks):
    sweep, publish = beat_tasks
    operator, client = staff_client("beat-operator")
    grant(operator, "django_celery_beat.view_periodictask", "django_celery_beat.change_periodictask")
    assert "disable_tasks" in client.get(TASKS_URL).content.decode()

    asked = act(client, "disable_tasks", [sweep])
    assert asked.status_code == 200 and "Give a reason" not in asked.content.decode()
    assert "ops-jobs-sweep" in asked.content.decode()
    blank = act(client, "disable_tasks", [sweep], reason="  ")
    assert blank.status_code == 200 and 'class="errorlist' in blank.content.decode()
    assert enabled(sweep) == [True] and AuditRecord.objects.count() == 0

    changed_before = PeriodicTasks.last_change()
    done = act(client, "disable_tasks", [sweep], reason="sweeper misbehaves")
    assert done.status_code == 302
    assert enabled(sweep, publish) == [False, True]
    assert PeriodicTasks.last_change() > changed_before  # beat reloads its schedule
    [record] = audits("periodic_task.disable")
    assert (record.actor, record.channel, record.target_type, record.target_id, record.outcome) == (
        "beat-operator", "admin", "periodic_task", "ops-jobs-sweep", "applied")
    assert record.params == {"task": "opsjobs.sweep", "enabled_before": True, "reason": "sweeper misbehaves"}

    assert act(client, "enable_tasks", [sweep, publish], reason="fixed").status_code == 302
    assert enabled(sweep, publish) == [True, True]
    assert [(r.target_id, r.outcome) for r in audits("periodic_task.enable")] == [
        ("ops-jobs-sweep", "applied"), ("publish-outbox", "unchanged")]


def test_a_disabled_task_stays_disabled_when_beat_syncs_the_schedule_from_code(beat_tasks):
    """Why only enable / disable / run now are offered: beat's start-up sync (what
    `DatabaseScheduler.setup_schedule` does for each CELERY_BEAT_SCHEDULE entry) rewrites an entry's
    task and schedule, but keeps `enabled`."""
    from likes_project.celery import app
    from opsconsole.services_beat import periodic_tasks_set_enabled
    from tests.factories import TEST_ACTOR

    sweep, _publish = beat_tasks
    periodic_tasks_set_enabled(ids=[sweep.pk], enabled=False, actor=TEST_ACTOR, reason="test")
    PeriodicTask.objects.filter(pk=sweep.pk).update(task="edited.in.the.database")
    ModelEntry.from_entry("ops-jobs-sweep", app=app, task="opsjobs.sweep", schedule=5.0)
    synced = PeriodicTask.objects.get(pk=sweep.pk)
    assert (synced.task, synced.enabled) == ("opsjobs.sweep", False)


def test_run_now_sends_the_task_once_and_is_audited(beat_tasks, broker_queue):
    sweep, _publish = beat_tasks
    operator, client = staff_client("beat-runner")
    grant(operator, "django_celery_beat.view_periodictask", "django_celery_beat.change_periodictask")
    assert act(client, "run_tasks_now", [sweep]).status_code == 200  # the reason form first
    assert broker_queue() == []
    assert act(client, "run_tasks_now", [sweep], reason="catch up after the outage").status_code == 302
    assert broker_queue() == [("opsjobs.sweep", "ops-jobs-sweep")]
    [record] = audits("periodic_task.run_now")
    assert (record.actor, record.target_id, record.outcome, record.params["reason"]) == (
        "beat-runner", "ops-jobs-sweep", "requested", "catch up after the outage")
    assert enabled(sweep) == [True]  # its schedule is untouched


def test_run_now_of_a_task_the_service_does_not_define_sends_nothing(beat_tasks, broker_queue):
    sweep, _publish = beat_tasks
    stray = PeriodicTask.objects.create(name="stray", task="no.such.task", interval=sweep.interval)
    operator, client = staff_client("beat-runner")
    grant(operator, "django_celery_beat.view_periodictask", "django_celery_beat.change_periodictask")
    resp = client.post(TASKS_URL, {"action": "run_tasks_now", "_selected_action": [sweep.pk, stray.pk],
                                   "confirm": "1", "reason": "try"}, follow=True)
    assert "Not a task this service defines: no.such.task." in resp.content.decode()
    assert broker_queue() == [] and AuditRecord.objects.count() == 0


def test_schedules_are_read_only_even_for_a_superuser(admin_client, beat_tasks):
    sweep, _publish = beat_tasks
    interval = sweep.interval
    for model in ("intervalschedule", "crontabschedule", "solarschedule", "clockedschedule", "periodictask"):
        assert admin_client.get(reverse(f"admin:django_celery_beat_{model}_changelist")).status_code == 200
        assert admin_client.get(reverse(f"admin:django_celery_beat_{model}_add")).status_code == 403
    change = reverse("admin:django_celery_beat_intervalschedule_change", args=[interval.pk])
    assert admin_client.post(change, {"every": 1, "period": "seconds"}).status_code == 403
    assert admin_client.post(reverse("admin:django_celery_beat_intervalschedule_delete", args=[interval.pk]),
                             {"post": "yes"}).status_code == 403
    assert IntervalSchedule.objects.get(pk=interval.pk).every == 5
    assert "disable_tasks" in admin_client.get(TASKS_URL).content.decode()  # a superuser may operate


# --- API tokens ----------------------------------------------------------------------------------


@pytest.fixture
def alice():
    user = make_user("alice-tok")
    return user, Token.objects.create(user=user)


def api_status(key: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get("/v1/videos/no-such-video/like-relation").status_code


def proxy_type() -> ContentType:
    return ContentType.objects.get_for_model(TokenProxy, for_concrete_model=False)


def session_and_cookies(client) -> str:
    return json.dumps(dict(client.session.items()), default=str) + " ".join(
        f"{c.key}={c.value}" for c in client.cookies.values())


def test_str_of_a_token_is_never_its_key(alice):
    _user, token = alice
    assert token.key not in str(token) and token_fingerprint(token.key) in str(token)
    assert token.key not in str(TokenProxy.objects.get(pk=token.pk))


def test_no_admin_page_shows_a_key(admin_client, alice):
    user, token = alice
    other = make_user("bob-tok")
    other_token = Token.objects.create(user=other)
    keys = (token.key, other_token.key)
    pages = {
        "list": admin_client.get(TOKENS_URL),
        "search": admin_client.get(TOKENS_URL, {"q": "alice"}),
        "detail": admin_client.get(reverse("admin:authtoken_tokenproxy_change", args=[user.pk])),
        "history": admin_client.get(reverse("admin:authtoken_tokenproxy_history", args=[user.pk])),
        "revoke": admin_client.get(reverse("admin:authtoken_tokenproxy_delete", args=[user.pk])),
        # Django's own user delete confirmation lists the token the delete would remove
        "user delete": admin_client.get(reverse("admin:auth_user_delete", args=[user.pk])),
    }
    for name, page in pages.items():
        assert page.status_code == 200, name
        html = page.content.decode()
        assert not any(k in html for k in keys), name
        assert not any(k[:8] in html for k in keys), name
    assert pages["list"].context["cl"].result_count == 2
    assert token_fingerprint(token.key) in pages["list"].content.decode()
    assert [t.user_id for t in pages["search"].context["cl"].result_list] == [user.pk]
    assert token_fingerprint(token.key) in pages["user delete"].content.decode()
    # the key is not a search key: guessing a prefix tells nothing
    assert admin_client.get(TOKENS_URL, {"q": token.key[:6]}).context["cl"].result_count == 0


def test_issuing_a_token_needs_its_permission(alice):
    _user, token = alice
    target = make_user("carol-tok")
    viewer, client = staff_client("token-viewer")
    grant(viewer, "authtoken.view_token")
    assert client.get(TOKENS_URL).status_code == 200
    assert client.get(reverse("admin:authtoken_tokenproxy_add")).status_code == 403
    assert client.post(reverse("admin:authtoken_tokenproxy_add"),
                       {"username": target.username, "reason": "r"}).status_code == 403
    revoke_url = reverse("admin:authtoken_tokenproxy_delete", args=[token.user_id])
    assert client.get(revoke_url).status_code == 403
    assert client.post(revoke_url, {"reason": "r"}).status_code == 403
    assert not Token.objects.filter(user=target).exists() and Token.objects.filter(pk=token.pk).exists()
    assert AuditRecord.objects.count() == 0
    # DRF's proxy permissions no longer open anything
    proxy_holder, proxy_client = staff_client("proxy-perms")
    grant(proxy_holder, "authtoken.view_tokenproxy", "authtoken.add_tokenproxy", "authtoken.delete_tokenproxy")
    assert proxy_client.get(TOKENS_URL).status_code == 403
    assert proxy_client.get(reverse("admin:authtoken_tokenproxy_add")).status_code == 403


def test_an_issued_key_is_shown_once_and_audited_without_it():
    target = make_user("dave-tok")
    issuer, client = staff_client("token-issuer")
    grant(issuer, "authtoken.view_token", "authtoken.add_token")
    add_url = reverse("admin:authtoken_tokenproxy_add")
    assert client.get(add_url).status_code == 200

    shown = client.post(add_url, {"username": target.username, "reason": "partner integration test"})
    assert shown.status_code == 200  # the key is in this response, not behind a redirect
    key = Token.objects.get(user=target).key
    html = shown.content.decode()
    assert f'<code id="api-token-key" style="font-size: 1.2em; user-select: all">{key}</code>' in html
    assert "no-store" in shown["Cache-Control"]
    assert api_status(key) == 200  # a working token

    # ... and never again: not on the next pages, not in the session or cookies (messages), not in
    # the audit record, not in the admin's LogEntry
    for url in (TOKENS_URL, reverse("admin:authtoken_tokenproxy_change", args=[target.pk]), "/admin/"):
        assert key not in client.get(url).content.decode(), url
    assert key not in session_and_cookies(client)
    [record] = audits("token.create")
    assert (record.actor, record.channel, record.target_id) == ("token-issuer", "admin", str(target.pk))
    assert record.params == {"username": "dave-tok", "fingerprint": token_fingerprint(key),
                             "reason": "partner integration test"}
    assert key not in json.dumps(list(AuditRecord.objects.values()), default=str)
    [entry] = LogEntry.objects.filter(content_type=proxy_type())
    assert entry.action_flag == ADDITION and entry.object_id == str(target.pk)
    assert key not in entry.object_repr + entry.change_message


def test_issuing_is_refused_with_a_form_error_and_nothing_written(alice):
    user, token = alice
    inactive = make_user("erin-tok")
    inactive.is_active = False
    inactive.save(update_fields=["is_active"])
    target = make_user("frank-tok")
    issuer, client = staff_client("token-issuer")
    grant(issuer, "authtoken.add_token")
    add_url = reverse("admin:authtoken_tokenproxy_add")
    cases = [
        ({"username": target.username, "reason": " "}, "This field is required."),
        ({"username": "nobody-by-this-name", "reason": "r"}, "No user by this name."),
        ({"username": inactive.username, "reason": "r"}, "is not active"),
        ({"username": user.username, "reason": "r"}, "already has an API token"),
    ]
    for data, error in cases:
        resp = client.post(add_url, data)
        assert resp.status_code == 200 and error in resp.content.decode(), error
        assert 'id="api-token-key"' not in resp.content.decode()
    assert list(Token.objects.values_list("key", flat=True)) == [token.key]
    assert AuditRecord.objects.count() == 0


def test_revoking_needs_a_reason_is_audited_and_the_key_stops_working(alice):
    user, token = alice
    key = token.key
    assert api_status(key) == 200
    revoker, client = staff_client("token-revoker")
    grant(revoker, "authtoken.view_token", "authtoken.delete_token")
    detail = client.get(reverse("admin:authtoken_tokenproxy_change", args=[user.pk])).content.decode()
    revoke_url = reverse("admin:authtoken_tokenproxy_delete", args=[user.pk])
    assert revoke_url in detail  # the detail page's "Delete" link is the revoke page

    blank = client.post(revoke_url, {"reason": ""})
    assert blank.status_code == 200 and Token.objects.filter(user=user).exists()
    done = client.post(revoke_url, {"reason": "laptop stolen"}, follow=True)
    assert done.status_code == 200 and "Revoked the API token" in done.content.decode()
    assert not Token.objects.filter(user=user).exists()
    assert api_status(key) == 401
    [record] = audits("token.revoke")
    assert (record.actor, record.target_id, record.params) == (
        "token-revoker", str(user.pk),
        {"username": "alice-tok", "fingerprint": token_fingerprint(key), "reason": "laptop stolen"})
    [entry] = LogEntry.objects.filter(content_type=proxy_type())
    assert entry.action_flag == DELETION and key not in entry.object_repr and entry.object_id == str(user.pk)
    again = client.post(revoke_url, {"reason": "twice"}, follow=True)
    assert "That user has no API token." in again.content.decode() and len(audits("token.revoke")) == 1
