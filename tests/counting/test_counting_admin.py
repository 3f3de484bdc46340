"""The admin pages for the event log and the count projection (issue 3 §5): vbuckets per video, the
audited consumer and count-refresh switches, and the read-only control-plane pages. The /metrics gauges
are in test_metrics.py."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from counting import routing as count_routing
from counting.models import (
    CountBucketRoute,
    CountBucketSpace,
    CountProjectionGeneration,
    CountRefreshSwitch,
    CountRouteManifest,
    CountRouteManifestItem,
    VideoDisplayCount,
    VideoLikeCountVbucket,
)
from counting.services.projection import CountProjector
from counting.services.snapshots import display_snapshot_refresh
from likes_project import leases
from likes_project.audit.models import AuditRecord
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import consume_partition
from likes_project.eventlog.models import ConsumerCheckpoint, ConsumerSwitch, DeadLetter, Lease, StreamContract
from likes_project.eventlog.services import consumer_switch_set
from tests.counting.helpers import SHARDS, dead_letter, project_everything, publish
from tests.factories import TEST_ACTOR, grant, login_non_staff
from tests.relations.helpers import cmd as like

# Transactional: the publisher only takes rows whose transaction has committed (architecture §4).
# Admin pages and their audited switches: what the switches do to the stores is tested on `scaled` elsewhere
# (test_projection, test_metrics), so this module runs on `single` only (D100).
pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

VBUCKETS_URL = "/admin/counting/videodisplaycount/vbuckets/"


# --- helpers -----------------------------------------------------------------------------------


def count_route(user, video_id: str) -> tuple[str, int]:
    gen = count_routing.active()
    vb = count_routing.virtual_bucket(gen.space, video_id, user.pk)
    return gen.routes[vb].partition, vb


# --- admin: vbuckets per video -----------------------------------------------------------------


def _likers_on_both_partitions(make_user, video_id: str):
    """Users on both relation shards whose buckets land on both count partitions."""
    users = [make_user(shard="rel_00"), make_user(shard="rel_01")]
    while {count_route(u, video_id)[0] for u in users} != set(settings.COUNT_BOOTSTRAP_PARTITIONS):
        users.append(make_user(shard=SHARDS[len(users) % 2]))
        assert len(users) < 40, "bucket routes never reached every count partition"
    return users


def test_vbuckets_page_lists_every_bucket_of_the_video_and_the_sum(admin_client, make_user, make_video, author):
    make_video("vid-v", author)
    make_video("vid-other", author)
    likers = _likers_on_both_partitions(make_user, "vid-v")
    withdrawn = make_user(shard="rel_01")
    for user in likers:
        like(user, "vid-v")
    like(likers[0], "vid-other")
    like(withdrawn, "vid-v")
    like(withdrawn, "vid-v", "UNLIKED")  # a like withdrawn: its bucket may hold a 0, never a 1
    for alias in SHARDS:
        publish(alias)
    project_everything()
    display_snapshot_refresh()

    resp = admin_client.get(VBUCKETS_URL, {"video_id": "vid-v"})

    assert resp.status_code == 200
    result = resp.context["result"]
    expected: dict[tuple[str, int], int] = {}
    for user in likers:
        expected[count_route(user, "vid-v")] = expected.get(count_route(user, "vid-v"), 0) + 1
    shown = {(r.alias, r.virtual_bucket): r.active_count for r in result.rows}
    assert {k: v for k, v in shown.items() if v} == expected
    assert set(shown) <= set(expected) | {count_route(withdrawn, "vid-v")}
    assert {r.alias for r in result.rows} == set(settings.COUNT_BOOTSTRAP_PARTITIONS)
    assert all(r.routed for r in result.rows)
    assert result.routed_sum == len(likers)
    assert result.generation == count_routing.active().generation
    assert result.snapshot.raw_active_count == len(likers)
    assert result.snapshot_matches is True
    page = resp.content.decode()
    assert f'<td id="vbuckets-sum">{len(likers)}</td>' in page
    assert page.count('class="vbucket-row') == len(shown)
    for alias in settings.COUNT_BOOTSTRAP_PARTITIONS:  # the partition added later holds no rows
        assert f'<td class="partition-alias">{alias}</td>' in page


def test_vbuckets_page_flags_a_row_on_a_partition_the_manifest_does_not_route_to(admin_client, make_user,
                                                                                  make_video, author):
    make_video("vid-v", author)
    user = make_user(shard="rel_00")
    like(user, "vid-v")
    publish("rel_00")
    project_everything()
    alias, vb = count_route(user, "vid-v")
    stray_alias = next(a for a in settings.COUNT_PARTITION_ALIASES if a != alias)
    gen = count_routing.active()
    VideoLikeCountVbucket.objects.using(stray_alias).create(
        generation=gen.generation, video_id="vid-v", virtual_bucket=vb, bucket_space_version=gen.space.version,
        active_count=5, updated_at=timezone.now())

    result = admin_client.get(VBUCKETS_URL, {"video_id": "vid-v"}).context["result"]

    assert [(r.alias, r.routed, r.active_count) for r in result.rows] == sorted(
        [(alias, True, 1), (stray_alias, False, 5)], key=lambda t: t[0])
    assert (result.routed_sum, result.unrouted_rows, result.unrouted_sum) == (1, 1, 5)
    assert result.snapshot is None  # no snapshot has run


def test_vbuckets_page_rejects_a_malformed_video_id(admin_client):
    resp = admin_client.get(VBUCKETS_URL, {"video_id": "not a video id!"})
    assert resp.status_code == 200
    assert resp.context["result"] is None
    assert "videoId must be" in resp.content.decode()


def test_vbuckets_page_needs_its_permission_and_is_linked_from_the_index(client, admin_client, staff):
    assert reverse("admin:counting_vbuckets") == VBUCKETS_URL
    assert VBUCKETS_URL in admin_client.get("/admin/").content.decode()
    assert VBUCKETS_URL in admin_client.get("/admin/counting/").content.decode()
    assert VBUCKETS_URL not in admin_client.get("/admin/eventlog/").content.decode()

    client.force_login(staff)
    assert client.get(VBUCKETS_URL, {"video_id": "vid-v"}).status_code == 403
    assert VBUCKETS_URL not in client.get("/admin/").content.decode()

    grant(staff, "counting.view_videolikecountvbucket")
    assert client.get(VBUCKETS_URL, {"video_id": "vid-v"}).status_code == 200
    assert VBUCKETS_URL in client.get("/admin/").content.decode()
    assert client.post(VBUCKETS_URL, {"video_id": "vid-v"}).status_code == 405


def test_vbuckets_page_is_refused_to_non_staff(client):
    login_non_staff(client, "counting.view_videolikecountvbucket")
    resp = client.get(VBUCKETS_URL)
    assert resp.status_code == 302 and "/admin/login/" in resp["Location"]


# --- admin: consumer switch --------------------------------------------------------------------


@pytest.fixture
def count_switch():
    consumer_switch_set(consumer="count", paused=False, reason="", actor=TEST_ACTOR)
    return reverse("admin:eventlog_consumerswitch_change", args=["count"])


def test_pausing_a_consumer_without_a_reason_is_a_form_error_and_writes_nothing(admin_client, count_switch):
    audits = AuditRecord.objects.count()

    resp = admin_client.post(count_switch, {"paused": "on", "reason": "  "})

    assert resp.status_code == 200
    assert "Give a reason for pausing this consumer." in resp.content.decode()
    switch = ConsumerSwitch.objects.get(consumer="count")
    assert (switch.paused, switch.updated_by) == (False, TEST_ACTOR.name)
    assert AuditRecord.objects.count() == audits


def test_pausing_a_consumer_with_a_reason_goes_through_the_audited_service(admin_client, count_switch):
    resp = admin_client.post(count_switch, {"paused": "on", "reason": "snapshot barrier"})

    assert resp.status_code == 302, resp.content.decode()[:2000]
    switch = ConsumerSwitch.objects.get(consumer="count")
    assert (switch.paused, switch.reason, switch.updated_by) == (True, "snapshot barrier", "admin")
    audit = AuditRecord.objects.filter(action="consumer.pause").get()
    assert (audit.actor, audit.channel, audit.target_id, audit.params) == (
        "admin", "admin", "count", {"reason": "snapshot barrier"})
    # The pause is real: the projector stops dispatching.
    assert consume_partition(CountProjector(), partition=0).status == "paused"

    assert admin_client.post(count_switch, {"reason": ""}).status_code == 302
    assert ConsumerSwitch.objects.get(consumer="count").paused is False
    assert AuditRecord.objects.filter(action="consumer.resume", actor="admin").count() == 1


def test_a_switch_can_be_added_for_a_consumer_that_has_run(admin_client):
    add_url = reverse("admin:eventlog_consumerswitch_add")
    assert admin_client.post(add_url, {"consumer": "count", "paused": "on", "reason": "x"}).status_code == 200
    assert not ConsumerSwitch.objects.exists()  # "count" has no checkpoint yet: not a known consumer

    project_everything()
    resp = admin_client.post(add_url, {"consumer": "count", "paused": "on", "reason": "incident 42"})

    assert resp.status_code == 302
    assert ConsumerSwitch.objects.get(consumer="count").paused is True
    assert AuditRecord.objects.filter(action="consumer.pause", target_id="count", channel="admin").count() == 1


def test_a_consumer_switch_cannot_be_deleted(admin_client, count_switch):
    delete_url = reverse("admin:eventlog_consumerswitch_delete", args=["count"])
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    assert ConsumerSwitch.objects.filter(consumer="count").exists()


# --- admin: count refresh switch ---------------------------------------------------------------


def test_refresh_switch_changes_are_audited(admin_client):
    add_url = reverse("admin:counting_countrefreshswitch_add")

    refused = admin_client.post(add_url, {"video_id": "vid-r", "paused": "on", "reason": ""})
    assert refused.status_code == 200
    assert "Give a reason" in refused.content.decode()
    assert not CountRefreshSwitch.objects.exists()
    assert not AuditRecord.objects.filter(action__startswith="count.refresh").exists()

    assert admin_client.post(add_url, {"video_id": "vid-r", "paused": "on", "reason": "hot spam wave"}
                             ).status_code == 302
    switch = CountRefreshSwitch.objects.get(video_id="vid-r")
    assert (switch.paused, switch.reason, switch.updated_by) == (True, "hot spam wave", "admin")
    pause = AuditRecord.objects.get(action="count.refresh_pause")
    assert (pause.target_type, pause.target_id, pause.channel) == ("video", "vid-r", "admin")

    change_url = reverse("admin:counting_countrefreshswitch_change", args=["vid-r"])
    assert admin_client.post(change_url, {"reason": ""}).status_code == 302
    assert CountRefreshSwitch.objects.get(video_id="vid-r").paused is False
    assert AuditRecord.objects.filter(action="count.refresh_resume", target_id="vid-r").count() == 1


# --- admin: read-only pages --------------------------------------------------------------------

READ_ONLY = [StreamContract, Lease, ConsumerCheckpoint, DeadLetter, CountBucketSpace, CountProjectionGeneration,
             CountRouteManifest, CountRouteManifestItem, CountBucketRoute, VideoDisplayCount]


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda m: m.__name__)
def test_read_only_admins_refuse_add_change_and_delete(admin_client, rf, admin_user, model):
    model_admin = admin.site._registry[model]
    request = rf.get("/admin/")
    request.user = admin_user
    assert model_admin.has_add_permission(request) is False
    assert model_admin.has_change_permission(request) is False
    assert model_admin.has_delete_permission(request) is False
    assert model_admin.has_view_permission(request) is True
    opts = model._meta
    assert admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add")).status_code == 403
    assert admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")).status_code == 200


def test_control_plane_lists_show_their_rows(admin_client, make_user, make_video, author):
    make_video("vid-m", author)
    like(make_user(shard="rel_00"), "vid-m")
    publish("rel_00")
    project_everything()
    display_snapshot_refresh()
    stale = leases.lease_acquire(resource="test:stale", holder="h-old", ttl_s=-5)
    live = leases.lease_acquire(resource="test:live", holder="h-live", ttl_s=300)

    def changelist(model):
        resp = admin_client.get(reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"))
        assert resp.status_code == 200
        return resp

    leases_page = changelist(Lease)
    by_resource = {obj.resource: obj for obj in leases_page.context["cl"].result_list}
    assert {stale.resource, live.resource} <= set(by_resource)
    lease_admin = leases_page.context["cl"].model_admin
    assert lease_admin.expired(by_resource["test:stale"]) is True
    assert lease_admin.expired(by_resource["test:live"]) is False

    checkpoints = changelist(ConsumerCheckpoint).context["cl"].result_list
    assert {(c.consumer, c.partition) for c in checkpoints} == {("count", p) for p in streams.all_partitions()}
    assert sum(c.applied_total for c in checkpoints) == 1

    gen = count_routing.active()
    manifests = changelist(CountRouteManifest).context["cl"].result_list
    active_manifest = next(m for m in manifests if m.pk == gen.manifest_id)
    assert active_manifest.items_stored == gen.space.virtual_buckets == active_manifest.row_count
    assert changelist(CountProjectionGeneration).context["cl"].result_count == 1
    snapshots = changelist(VideoDisplayCount)
    assert [r.video_id for r in snapshots.context["cl"].result_list] == ["vid-m"]
    assert f"{VBUCKETS_URL}?video_id=vid-m" in snapshots.content.decode()


def test_dead_letter_admin_lists_filters_searches_and_shows_payload(admin_client):
    letter = dead_letter("200-0", video_id="vid-dead")
    dead_letter("201-0", video_id="vid-alive", consumer="other")
    url = reverse("admin:eventlog_deadletter_changelist")

    listed = admin_client.get(url)
    assert {r.entry_id for r in listed.context["cl"].result_list} == {"200-0", "201-0"}
    assert "200-0" in listed.content.decode()
    filtered = admin_client.get(url, {"consumer": "count", "status__exact": "NEW", "error_class": "NonRetryable"})
    assert [r.entry_id for r in filtered.context["cl"].result_list] == ["200-0"]
    assert admin_client.get(url, {"error_class": "KeyError"}).context["cl"].result_count == 0
    assert [r.entry_id for r in admin_client.get(url, {"q": "vid-dead"}).context["cl"].result_list] == ["200-0"]
    assert [r.pk for r in admin_client.get(url, {"q": letter.event_id}).context["cl"].result_list] == [letter.pk]

    detail = admin_client.get(reverse("admin:eventlog_deadletter_change", args=[letter.pk]))
    assert detail.status_code == 200
    page = detail.content.decode()
    assert "payload is missing relationVersion" in page
    assert "&quot;videoId&quot;: &quot;vid-dead&quot;" in page
    change = admin_client.post(reverse("admin:eventlog_deadletter_change", args=[letter.pk]), {"status": "RESOLVED"})
    assert change.status_code == 403
    assert DeadLetter.objects.get(pk=letter.pk).status == "NEW"


def test_route_items_and_routes_are_listed(admin_client):
    gen = count_routing.active()
    items = admin_client.get(reverse("admin:counting_countroutemanifestitem_changelist"), {"q": "3"})
    assert [(i.virtual_bucket, i.physical_partition) for i in items.context["cl"].result_list] == [
        (3, gen.routes[3].partition)]
    assert CountRouteManifestItem.objects.filter(manifest_id=gen.manifest_id).count() == gen.space.virtual_buckets
    routes = admin_client.get(reverse("admin:counting_countbucketroute_changelist"), {"q": "5"})
    assert [r.physical_partition for r in routes.context["cl"].result_list] == [gen.routes[5].partition]
    assert CountBucketRoute.objects.count() == gen.space.virtual_buckets
