"""The console's side of issue 13: the virtual-bucket migration ledger in the admin (read-only), the "Plan a
migration" page and the Approve / Resume / Abort buttons, each through the ledger service
(`counting.services.migration.ledger`), refused (403) without its permission, a refusal of the service an
error message (or a form error) and never a 500; approve and resume only start the system's ops job, which
is never run here. And the per-video vbuckets page: each bucket's route (partition, epoch) and the
unfinished migrations moving its buckets.

The test databases have three count partitions, the bootstrap routes on cnt_00 and cnt_01 only (cnt_02 is
where a migration scales out to)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from counting import routing
from counting.admin import BucketMigrationAdmin
from counting.models import BucketMigration, VideoLikeCountVbucket
from counting.services.migration import ledger
from likes_project.audit.models import AuditRecord
from likes_project.audit.services import Actor
from likes_project.opsjobs.models import OpsJob
from tests.reconciliation.helpers import assert_read_only, audits, logged_in, shown_messages

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

LEDGER_URL = "/admin/counting/bucketmigration/"
PLAN_URL = "/admin/counting/bucketmigration/plan/"
VBUCKETS_URL = "/admin/counting/videodisplaycount/vbuckets/"
TARGET = "cnt_02"
PLANNER = Actor(name="mig-planner", channel="cli")


# --- helpers -----------------------------------------------------------------------------------


def planned(buckets: str = "0-3", *, actor: Actor = PLANNER) -> BucketMigration:
    """A migration planned through the service (as the command plans one), AWAITING_APPROVAL."""
    return ledger.migration_plan(target=TARGET, buckets=buckets, reason="scale out", actor=actor)


def page_url(page: str, m_id: int) -> str:
    """The console URL of migration `m_id`'s `page`: its change page, or approve, resume or abort."""
    return reverse("admin:counting_bucketmigration_change" if page == "change" else f"admin:counting_migration_{page}",
                   args=[m_id])


def migration_jobs() -> list[OpsJob]:
    return list(OpsJob.objects.filter(kind=ledger.MIGRATION_JOB).order_by("id"))


def state_of(m) -> str:
    return BucketMigration.objects.get(pk=m.pk).state


# --- the ledger table --------------------------------------------------------------------------


def test_the_ledger_is_on_the_console_site_and_read_only_even_for_a_superuser():
    assert isinstance(admin.site.get_model_admin(BucketMigration), BucketMigrationAdmin)
    m = planned()
    _su, client = logged_in("mig-super", superuser=True)
    assert_read_only(client, m, {"state": "RETIRED"})
    assert state_of(m) == "AWAITING_APPROVAL"


def test_the_list_and_the_page_show_the_plan_progress_and_the_report():
    gen = routing.active()
    m = planned("0-3,8")
    BucketMigration.objects.filter(pk=m.pk).update(
        state="VERIFY", copied_rows=7, replayed_events=3, write_pause_ms=12.345,
        target_manifest_id=m.source_manifest_id + 1, copy_cursor={"cnt_00:projection": {"bucket": 2, "seq": 40}},
        baseline={"cnt_00": 11},
        final_watermark={"cnt_00": 19}, verify_result={"ok": True, "rows": 7}, approved_by="mig-approver",
        cutover_at=timezone.now(), error="")
    sources = sorted({gen.routes[vb].partition for vb in (0, 1, 2, 3, 8)})
    epochs = sorted({gen.routes[vb].epoch for vb in (0, 1, 2, 3, 8)})
    _viewer, client = logged_in("mig-viewer", "likes-viewer")

    listing = client.get(LEDGER_URL)
    assert listing.status_code == 200 and listing.context["cl"].result_count == 1
    text = listing.content.decode()
    assert '<span class="state-code">VERIFY</span>' in text
    assert "0-3,8" in text
    assert f"{', '.join(sources)} \u2192 {TARGET}" in text
    assert f"{', '.join(map(str, epochs))} \u2192 {', '.join(str(e + 1) for e in epochs)}" in text
    assert f"7 / {m.rows_to_copy}" in text and "12.3 ms" in text
    assert "mig-planner" in text and "mig-approver" in text
    assert PLAN_URL not in text  # a viewer may not plan

    page = client.get(page_url("change", m.pk))
    assert page.status_code == 200
    body = page.content.decode()
    for css in ("migration-copy-cursor", "migration-baseline", "migration-final-watermark", "migration-verify",
                "migration-report"):
        assert f'<pre class="{css}">' in body, css
    assert "&quot;cnt_00:projection&quot;" in body and "&quot;migrationId&quot;: " + str(m.pk) in body
    assert "target_type=bucket_migration" in body  # the audit link
    # a viewer is offered no button
    for form in ("migration-approve-form", "migration-resume-form", "migration-abort"):
        assert form not in body, form


def test_a_viewer_can_neither_plan_approve_resume_nor_abort_and_nothing_changes():
    m = planned()
    _viewer, client = logged_in("mig-viewer", "likes-viewer")
    before = AuditRecord.objects.count()
    assert client.get(PLAN_URL).status_code == 403
    assert client.post(PLAN_URL, {"target": TARGET, "buckets": "8-9", "reason": "x"}).status_code == 403
    assert client.post(page_url("approve", m.pk)).status_code == 403
    assert client.post(page_url("resume", m.pk)).status_code == 403
    assert client.get(page_url("abort", m.pk)).status_code == 403
    assert client.post(page_url("abort", m.pk), {"reason": "x"}).status_code == 403
    assert list(BucketMigration.objects.values_list("pk", "state")) == [(m.pk, "AWAITING_APPROVAL")]
    assert migration_jobs() == [] and AuditRecord.objects.count() == before


def test_an_operator_may_plan_but_not_approve_or_abort():
    m = planned()
    _op, client = logged_in("mig-op", "likes-operator")
    assert client.get(PLAN_URL).status_code == 200
    assert client.post(page_url("approve", m.pk)).status_code == 403
    assert client.post(page_url("abort", m.pk), {"reason": "x"}).status_code == 403
    assert state_of(m) == "AWAITING_APPROVAL" and migration_jobs() == []


def test_the_buttons_answer_post_only():
    m = planned()
    _approver, client = logged_in("mig-approver", "likes-approver")
    assert client.get(page_url("approve", m.pk)).status_code == 405
    assert client.get(page_url("resume", m.pk)).status_code == 405
    assert state_of(m) == "AWAITING_APPROVAL" and migration_jobs() == []


# --- plan --------------------------------------------------------------------------------------


def test_an_operator_plans_a_migration_through_the_form():
    gen = routing.active()
    op, client = logged_in("mig-op", "likes-operator")
    listing = client.get(LEDGER_URL).content.decode()
    assert f'href="{PLAN_URL}"' in listing
    form = client.get(PLAN_URL)
    assert form.status_code == 200
    choices = [v for v, _label in form.context["form"].fields["target"].choices]
    assert choices == list(settings.COUNT_PARTITION_ALIASES) == ["cnt_00", "cnt_01", "cnt_02"]
    assert "cnt_02 (0 buckets now)" in form.content.decode()

    resp = client.post(PLAN_URL, {"target": TARGET, "buckets": "0-3", "reason": "  scale out onto cnt_02 "})
    m = BucketMigration.objects.get()
    assert resp.status_code == 302 and resp.url == page_url("change", m.pk)
    assert (m.state, m.buckets, m.target_partition, m.reason) == (
        "AWAITING_APPROVAL", [0, 1, 2, 3], TARGET, "scale out onto cnt_02")
    assert (m.requested_by, m.requested_channel, m.approved_by, m.job_id) == (op.username, "admin", "", None)
    assert m.source_partitions == {str(vb): gen.routes[vb].partition for vb in range(4)}
    assert m.source_epochs == {str(vb): gen.routes[vb].epoch for vb in range(4)}
    [record] = audits("bucket_migration.plan")
    assert (record.actor, record.channel, record.target_type, record.target_id) == (
        op.username, "admin", "bucket_migration", str(m.pk))
    assert record.params["buckets"] == "0-3" and record.params["to"] == TARGET
    assert migration_jobs() == []  # planning starts nothing

    page = client.get(resp.url)
    assert any(f"Planned migration {m.pk}: buckets 0-3 (4) -> {TARGET}" in msg for msg in shown_messages(page))
    body = page.content.decode()
    assert '<span class="state-code">AWAITING_APPROVAL</span>' in body
    assert "migration-approve-form" not in body  # an operator does not approve


@pytest.mark.parametrize("data, field, error", [
    ({"target": TARGET, "buckets": "abc", "reason": "x"}, "buckets", "(invalid_buckets)"),
    ({"target": TARGET, "buckets": "3-1", "reason": "x"}, "buckets", "(invalid_buckets)"),
    ({"target": TARGET, "buckets": "0-99999999", "reason": "x"}, "buckets", "(invalid_buckets)"),
    ({"target": TARGET, "buckets": " , ", "reason": "x"}, "buckets", "(invalid_buckets)"),
    ({"target": "ON_SOURCE", "buckets": "0", "reason": "x"}, "buckets", "(already_on_target)"),
    ({"target": "cnt_09", "buckets": "0-3", "reason": "x"}, "target", "Select a valid choice."),
    ({"buckets": "0-3", "reason": "x"}, "target", "This field is required."),
    ({"target": TARGET, "buckets": "0-3", "reason": "   "}, "reason", "This field is required."),
])
def test_bad_plan_input_is_a_form_error_and_writes_nothing(data, field, error):
    data = {**data, "target": routing.active().routes[0].partition} if data.get("target") == "ON_SOURCE" else data
    _op, client = logged_in("mig-typo", "likes-operator")
    before = AuditRecord.objects.count()
    resp = client.post(PLAN_URL, data)
    assert resp.status_code == 200
    form = resp.context["form"]
    assert any(error in e for e in form.errors.get(field, [])), form.errors
    assert error in resp.content.decode().replace("&#x27;", "'")
    assert BucketMigration.objects.count() == 0 and AuditRecord.objects.count() == before


def test_a_plan_overlapping_an_unfinished_migration_is_refused_on_the_form():
    first = planned("0-3")
    _op, client = logged_in("mig-op", "likes-operator")
    resp = client.post(PLAN_URL, {"target": TARGET, "buckets": "2-5", "reason": "x"})
    assert resp.status_code == 200
    [error] = resp.context["form"].errors["buckets"]
    assert f"migration {first.pk} (AWAITING_APPROVAL) also moves buckets 2-3" in error
    assert "(migration_overlap)" in error
    assert list(BucketMigration.objects.values_list("pk", flat=True)) == [first.pk]


# --- approve -----------------------------------------------------------------------------------


def test_the_requester_cannot_approve_their_own_migration():
    both, client = logged_in("mig-both", "likes-operator", "likes-approver")
    client.post(PLAN_URL, {"target": TARGET, "buckets": "0-3", "reason": "scale out"})
    m = BucketMigration.objects.get()
    page = client.get(page_url("change", m.pk)).content.decode()
    assert "migration-approve-form" in page and 'class="migration-own"' in page  # offered, with the warning

    resp = client.post(page_url("approve", m.pk), follow=True)
    assert resp.status_code == 200 and resp.redirect_chain == [(page_url("change", m.pk), 302)]
    [error] = shown_messages(resp)
    assert f"Migration {m.pk} was not approved (self_approval)" in error and "another operator must" in error
    m.refresh_from_db()
    assert (m.state, m.approved_by, m.job_id) == ("AWAITING_APPROVAL", "", None)
    assert migration_jobs() == []
    [refusal] = audits("bucket_migration.approve")
    assert (refusal.actor, refusal.outcome) == (both.username, "refused")


def test_another_approver_approves_and_the_system_job_is_started_not_run():
    m = planned()
    approver, client = logged_in("mig-approver", "likes-approver")
    page = client.get(page_url("change", m.pk)).content.decode()
    assert "migration-approve-form" in page and "migration-resume-form" not in page
    assert 'class="migration-own"' not in page

    resp = client.post(page_url("approve", m.pk))
    assert resp.status_code == 302 and resp.url == page_url("change", m.pk)
    m.refresh_from_db()
    [job] = migration_jobs()
    assert (m.state, m.approved_by, m.job_id) == ("PREPARE", approver.username, job.pk)
    assert (job.status, job.params, job.actor, job.channel) == ("QUEUED", {"migrationId": m.pk}, "bucket-migration",
                                                                "system")
    assert m.copied_rows == 0 and not m.copy_cursor  # nothing ran in the request
    [record] = audits("bucket_migration.prepare")
    assert (record.actor, record.channel, record.target_id) == (approver.username, "admin", str(m.pk))

    after = client.get(resp.url)
    assert any(f"Approved migration {m.pk}: it is PREPARE; the system runs it as" in msg
               for msg in shown_messages(after))
    body = after.content.decode()
    assert reverse("admin:opsjobs_opsjob_change", args=[job.pk]) in body
    assert '<span class="state-code">PREPARE</span>' in body
    assert "migration-approve-form" not in body and "migration-resume-form" in body
    assert f'href="{page_url("abort", m.pk)}"' in body
    assert '<meta http-equiv="refresh" content="2">' in body  # its job is not finished

    again = client.post(page_url("approve", m.pk), follow=True)  # a second approval: refused, nothing more started
    assert any("(migration_not_awaiting_approval)" in msg for msg in shown_messages(again))
    assert len(migration_jobs()) == 1


def test_approving_a_migration_that_does_not_exist_is_a_message_not_a_500():
    _approver, client = logged_in("mig-ghost", "likes-approver")
    for url in (page_url("approve", 99999), page_url("resume", 99999), page_url("abort", 99999)):
        resp = client.post(url, {"reason": "x"}, follow=True)
        assert resp.status_code == 200
        assert resp.redirect_chain == [(LEDGER_URL, 302)]
        assert any("(migration_not_found)" in msg for msg in shown_messages(resp))
    assert migration_jobs() == [] and BucketMigration.objects.count() == 0


# --- resume ------------------------------------------------------------------------------------


def test_resume_is_refused_while_the_migration_awaits_approval():
    m = planned()
    _approver, client = logged_in("mig-approver", "likes-approver")
    assert "migration-resume-form" not in client.get(page_url("change", m.pk)).content.decode()  # not offered
    resp = client.post(page_url("resume", m.pk), follow=True)
    assert resp.status_code == 200 and resp.redirect_chain == [(page_url("change", m.pk), 302)]
    [error] = shown_messages(resp)
    assert f"Migration {m.pk} was not resumed (migration_not_resumable)" in error
    assert "AWAITING_APPROVAL; there is nothing to resume" in error
    assert state_of(m) == "AWAITING_APPROVAL" and migration_jobs() == []
    assert audits("bucket_migration.resume") == []


def test_resume_is_refused_while_its_job_is_queued_and_starts_a_new_job_once_it_stopped():
    m = planned()
    _approver, client = logged_in("mig-approver", "likes-approver")
    client.post(page_url("approve", m.pk))
    [job] = migration_jobs()
    resp = client.post(page_url("resume", m.pk), follow=True)
    assert any(f"(migration_running): migration {m.pk} is being run by job {job.pk}" in msg
               for msg in shown_messages(resp))
    assert len(migration_jobs()) == 1

    OpsJob.objects.filter(pk=job.pk).update(status="FAILED", finished_at=timezone.now())  # its worker gave up
    BucketMigration.objects.filter(pk=m.pk).update(error="its job stopped")
    resp = client.post(page_url("resume", m.pk), follow=True)
    m.refresh_from_db()
    [_old, new] = migration_jobs()
    assert (m.state, m.job_id, m.error, new.status) == ("PREPARE", new.pk, "", "QUEUED")
    assert any(f"Resumed migration {m.pk}: it is PREPARE" in msg for msg in shown_messages(resp))
    assert len(audits("bucket_migration.resume")) == 1


# --- abort -------------------------------------------------------------------------------------


@pytest.mark.parametrize("approved", [False, True], ids=["awaiting-approval", "prepare"])
def test_an_approver_aborts_a_migration_before_its_cutover_with_a_reason(approved):
    m = planned()
    approver, client = logged_in("mig-approver", "likes-approver")
    if approved:
        client.post(page_url("approve", m.pk))
        assert state_of(m) == "PREPARE"
    was = state_of(m)
    assert f'href="{page_url("abort", m.pk)}"' in client.get(page_url("change", m.pk)).content.decode()

    form = client.get(page_url("abort", m.pk))
    assert form.status_code == 200 and "migration-abort-form" in form.content.decode()
    empty = client.post(page_url("abort", m.pk), {"reason": "  "})
    assert empty.status_code == 200 and empty.context["form"].errors["reason"]
    assert state_of(m) == was

    resp = client.post(page_url("abort", m.pk), {"reason": "wrong partition"}, follow=True)
    assert resp.redirect_chain == [(page_url("change", m.pk), 302)]
    assert any(f"Aborted migration {m.pk} (it was {was})" in msg for msg in shown_messages(resp))
    m.refresh_from_db()
    assert (m.state, m.abort_reason) == ("ABORTED", "wrong partition") and m.finished_at is not None
    [record] = audits("bucket_migration.aborted")
    assert (record.actor, record.channel, record.params["reason"]) == (approver.username, "admin", "wrong partition")
    body = resp.content.decode()
    assert f'href="{page_url("abort", m.pk)}"' not in body and "migration-resume-form" not in body  # finished


def test_abort_after_the_cutover_is_refused_with_a_message():
    m = planned()
    BucketMigration.objects.filter(pk=m.pk).update(state="VERIFY", approved_by="mig-other",
                                                   target_manifest_id=m.source_manifest_id + 1)
    _approver, client = logged_in("mig-approver", "likes-approver")
    page = client.get(page_url("change", m.pk)).content.decode()
    assert f'href="{page_url("abort", m.pk)}"' not in page and "migration-resume-form" in page

    assert "plan a reverse migration" in client.get(page_url("abort", m.pk)).content.decode()
    resp = client.post(page_url("abort", m.pk), {"reason": "too late"}, follow=True)
    assert resp.redirect_chain == [(page_url("change", m.pk), 302)]
    [error] = shown_messages(resp)
    assert f"Migration {m.pk} was not aborted (migration_past_cutover)" in error
    assert state_of(m) == "VERIFY" and audits("bucket_migration.aborted") == []


# --- the vbuckets page -------------------------------------------------------------------------


def test_the_vbuckets_page_shows_each_buckets_route_and_the_unfinished_migrations_moving_them():
    gen = routing.active()
    vb_moved, vb_still = 5, gen.space.virtual_buckets - 1
    for vb in (vb_moved, vb_still):
        VideoLikeCountVbucket.objects.using(gen.routes[vb].partition).create(
            generation=gen.generation, video_id="vid-mig", virtual_bucket=vb, bucket_space_version=gen.space.version,
            active_count=2, updated_at=timezone.now())
    m = planned(f"{vb_moved}-{vb_moved + 2}")
    other = planned(f"{vb_moved + 3}")  # moves none of the video's buckets: not listed
    done = planned(f"{vb_still}")
    ledger.migration_abort(migration_id=done.pk, actor=PLANNER, reason="tests")  # finished: not listed
    _viewer, client = logged_in("mig-viewer", "likes-viewer")

    resp = client.get(VBUCKETS_URL, {"video_id": "vid-mig"})
    assert resp.status_code == 200
    rows = {b["row"].virtual_bucket: b for b in resp.context["bucket_rows"]}
    assert set(rows) == {vb_moved, vb_still}
    for vb, b in rows.items():
        assert (b["route"].partition, b["route"].epoch) == (gen.routes[vb].partition, gen.routes[vb].epoch)
    assert rows[vb_moved]["migration"].pk == m.pk and rows[vb_still]["migration"] is None
    assert [mv["migration"].pk for mv in resp.context["migrations"]] == [m.pk]
    assert resp.context["migrations"][0]["buckets"] == str(vb_moved)
    body = resp.content.decode()
    assert f'<td class="route-epoch">{gen.routes[vb_moved].epoch}</td>' in body
    assert f'<td class="route-partition">{gen.routes[vb_moved].partition}</td>' in body
    assert f'href="{page_url("change", m.pk)}"' in body and f'href="{page_url("change", other.pk)}"' not in body
    assert f'href="{page_url("change", done.pk)}"' not in body

    ledger.migration_abort(migration_id=m.pk, actor=PLANNER, reason="tests")
    again = client.get(VBUCKETS_URL, {"video_id": "vid-mig"})
    assert again.context["migrations"] == [] and 'id="vbuckets-no-migrations"' in again.content.decode()
