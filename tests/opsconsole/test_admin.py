"""The operations console in the Django admin (issue §6, OPS-1, OPS-2): read-only per-shard lookups
behind their own permission, and video snapshot / social edge edits that go through the services
(version bump, audit record, cache write-through or invalidation) while keeping the admin LogEntry."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse

from likes_project.audit.models import AuditRecord
from relations import cache, routing, selectors
from relations.models import Block, Friendship, LikeRelation, OutboxEvent, VideoSnapshot
from relations.services.commands import relation_set_state
from tests.factories import grant, login_non_staff, make_staff

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

LIKED, UNLIKED = "LIKED", "UNLIKED"
LOOKUP_URL = "/admin/opsconsole/auditrecord/lookup/"


def like(user, video_id: str, operation_id: str, desired: str = LIKED):
    return relation_set_state(user_id=user.pk, video_id=video_id, desired_state=desired, operation_id=operation_id)


def lookup(client, kind: str, **fields):
    return client.get(LOOKUP_URL, {"lookup": kind, **{f"{kind}-{k}": v for k, v in fields.items()}})


def log_entries(model, object_id) -> list[LogEntry]:
    ct = ContentType.objects.get_for_model(model)
    return list(LogEntry.objects.filter(content_type=ct, object_id=str(object_id)).order_by("id"))


def admin_audits(**filters) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(channel="admin", **filters).order_by("id"))


@pytest.fixture
def author(make_user):
    return make_user()


# --- lookup page -------------------------------------------------------------------------------


def test_lookup_url_is_the_named_admin_url():
    assert reverse("admin:opsconsole_lookup") == LOOKUP_URL


def test_relation_lookup_reads_each_users_own_shard(admin_client, make_user, make_video, author):
    make_video("vid-a", author)
    u0, u1 = make_user(shard="rel_00"), make_user(shard="rel_01")
    like(u0, "vid-a", "op-u0-1")
    like(u0, "vid-a", "op-u0-2", UNLIKED)
    like(u1, "vid-a", "op-u1-1")

    cases = [
        (u0.username, u0, "rel_00", UNLIKED, 2, ["op-u0-2", "op-u0-1"]),
        (str(u1.pk), u1, "rel_01", LIKED, 1, ["op-u1-1"]),  # by numeric id
    ]
    for query, user, alias, state, version, operations in cases:
        resp = lookup(admin_client, "relation", user=query, video_id="vid-a")
        assert resp.status_code == 200
        detail = resp.context["result"]
        assert detail.alias == alias == routing.alias_for_user(user.pk)
        assert detail.user.user_id == user.pk and detail.user.username == user.username
        rel = detail.relation
        assert (rel.state, rel.relation_version, rel.last_operation_id) == (state, version, operations[0])
        assert rel.state_changed_at is not None and rel.updated_at is not None
        assert [r.row.operation_id for r in detail.commands] == operations
        assert {r.alias for r in detail.commands} == {alias}
        assert [r.row.relation_version for r in detail.outbox] == list(range(version, 0, -1))
        assert {r.row.aggregate_key for r in detail.outbox} == {f"{user.pk}:vid-a"}
        assert f'<td class="shard-alias">{alias}</td>' in resp.content.decode()


def test_relation_lookup_counter_examples(admin_client, make_user, make_video, author):
    make_video("vid-a", author)
    make_video("vid-b", author)
    liker = make_user()
    like(liker, "vid-a", "op-1")

    other_video = lookup(admin_client, "relation", user=liker.username, video_id="vid-b")
    detail = other_video.context["result"]
    assert detail.relation is None and detail.commands == [] and detail.outbox == []
    assert "never acted on this video" in other_video.content.decode()

    unknown = lookup(admin_client, "relation", user="nobody-by-this-name", video_id="vid-a")
    assert unknown.status_code == 200 and unknown.context["result"] is None
    assert "No user named" in unknown.content.decode()

    bad_video = lookup(admin_client, "relation", user=liker.username, video_id="bad id!")
    assert bad_video.status_code == 200 and bad_video.context["result"] is None
    assert bad_video.context["forms"]["relation"].errors["video_id"]


def test_command_lookup_by_operation_id_searches_every_shard(admin_client, make_user, make_video, author):
    make_video("vid-a", author)
    u0, u1 = make_user(shard="rel_00"), make_user(shard="rel_01")
    like(u0, "vid-a", "shared-op")  # operation ids are unique per user only
    like(u1, "vid-a", "shared-op")
    like(u0, "vid-a", "u0-only", UNLIKED)

    everywhere = lookup(admin_client, "command", operation_id="shared-op").context["result"]
    assert sorted((r.alias, r.row.user_id, r.row.operation_id) for r in everywhere.rows) == [
        ("rel_00", u0.pk, "shared-op"), ("rel_01", u1.pk, "shared-op")]

    only_u1 = lookup(admin_client, "command", operation_id="shared-op", user=u1.username).context["result"]
    assert [(r.alias, r.row.user_id) for r in only_u1.rows] == [("rel_01", u1.pk)]

    on_rel_00 = lookup(admin_client, "command", operation_id="u0-only").context["result"]
    assert [(r.alias, r.row.user_id, r.row.result_state, r.row.result_version) for r in on_rel_00.rows] == [
        ("rel_00", u0.pk, UNLIKED, 2)]

    missing = lookup(admin_client, "command", operation_id="never-used")
    assert missing.context["result"].rows == []
    assert "No commands found." in missing.content.decode()


def test_outbox_lookup_by_status_across_shards_newest_first(admin_client, make_user, make_video, author):
    make_video("vid-a", author)
    make_video("vid-b", author)
    u0, u1 = make_user(shard="rel_00"), make_user(shard="rel_01")
    like(u0, "vid-a", "op-1")
    like(u1, "vid-a", "op-2")
    like(u0, "vid-b", "op-3")

    new_rows = lookup(admin_client, "outbox", status="NEW").context["result"].rows
    assert [(r.alias, r.row.aggregate_key) for r in new_rows] == [
        ("rel_00", f"{u0.pk}:vid-b"), ("rel_01", f"{u1.pk}:vid-a"), ("rel_00", f"{u0.pk}:vid-a")]

    OutboxEvent.objects.using("rel_01").filter(aggregate_key=f"{u1.pk}:vid-a").update(status="DEAD")
    dead = lookup(admin_client, "outbox", status="DEAD").context["result"].rows
    assert [(r.alias, r.row.aggregate_key, r.row.status) for r in dead] == [("rel_01", f"{u1.pk}:vid-a", "DEAD")]
    still_new = lookup(admin_client, "outbox", status="NEW").context["result"].rows
    assert {r.row.aggregate_key for r in still_new} == {f"{u0.pk}:vid-a", f"{u0.pk}:vid-b"}
    assert lookup(admin_client, "outbox", status="SENT").context["result"].rows == []


def test_outbox_lookup_by_event_id(admin_client, make_user, make_video, author):
    make_video("vid-a", author)
    u0, u1 = make_user(shard="rel_00"), make_user(shard="rel_01")
    like(u0, "vid-a", "op-1")
    like(u1, "vid-a", "op-2")
    event = OutboxEvent.objects.using("rel_01").get(aggregate_key=f"{u1.pk}:vid-a")

    resp = lookup(admin_client, "outbox", event_id=str(event.event_id))
    rows = resp.context["result"].rows
    assert [(r.alias, r.row.event_id, r.row.relation_version) for r in rows] == [("rel_01", event.event_id, 1)]
    assert str(event.event_id) in resp.content.decode()

    assert lookup(admin_client, "outbox", event_id=str(uuid.uuid4())).context["result"].rows == []

    neither = lookup(admin_client, "outbox")
    assert neither.context["result"] is None
    assert "Give either an event id or a status." in neither.content.decode()
    both = lookup(admin_client, "outbox", event_id=str(event.event_id), status="NEW")
    assert both.context["result"] is None


def test_lookup_needs_the_lookup_permission(client):
    staff_without_lookup = make_staff()
    client.force_login(staff_without_lookup)
    assert client.get(LOOKUP_URL).status_code == 403
    assert LOOKUP_URL not in client.get("/admin/").content.decode()

    grant(staff_without_lookup, "opsconsole.view_relation_lookup")
    assert client.get(LOOKUP_URL).status_code == 200
    assert LOOKUP_URL in client.get("/admin/").content.decode()
    # With only this permission the Opsconsole app page lists the lookup (and nothing else).
    assert LOOKUP_URL in client.get("/admin/opsconsole/").content.decode()


def test_lookup_is_refused_to_non_staff(client):
    login_non_staff(client, "opsconsole.view_relation_lookup")
    resp = client.get(LOOKUP_URL)
    assert resp.status_code == 302 and "/admin/login/" in resp["Location"]


def test_admin_index_links_to_the_lookup(admin_client):
    assert LOOKUP_URL in admin_client.get("/admin/").content.decode()
    assert LOOKUP_URL in admin_client.get("/admin/opsconsole/").content.decode()
    assert LOOKUP_URL not in admin_client.get("/admin/relations/").content.decode()


def test_lookup_is_read_only(admin_client, make_user, make_video, author):
    make_video("vid-a", author)
    liker = make_user()
    like(liker, "vid-a", "op-1")
    alias = routing.alias_for_user(liker.pk)

    resp = admin_client.post(LOOKUP_URL, {"lookup": "relation", "relation-user": liker.username,
                                          "relation-video_id": "vid-a", "relation-state": UNLIKED})
    assert resp.status_code == 405
    page = admin_client.get(LOOKUP_URL).content.decode()
    assert page.count('<form method="get"') == 3
    rel = LikeRelation.objects.using(alias).get(user_id=liker.pk, video_id="vid-a")
    assert (rel.state, rel.relation_version) == (LIKED, 1)


# --- video snapshots ---------------------------------------------------------------------------


def video_form(**overrides):
    """The video page's form: only the operator override (D50) and its reason."""
    return {"override_visibility": "", "override_status": "", "reason": "", "_save": "Save", **overrides}


def test_video_edit_is_an_override_through_the_service(admin_client, admin_user, make_video, author):
    make_video("vid-e", author)
    assert selectors.video_snapshot_get(video_id="vid-e").visibility == "public"  # now cached at revision 1
    url = reverse("admin:relations_videosnapshot_change", args=["vid-e"])

    resp = admin_client.post(url, video_form(override_visibility="private", reason="legal hold", version="99"))
    assert resp.status_code == 302

    snap = VideoSnapshot.objects.get(pk="vid-e")
    # The service's version is untouched (the posted one is ignored); the override is stored apart.
    assert (snap.version, snap.service_visibility, snap.override_visibility, snap.visibility) == (
        1, "public", "private", "private")
    [audit] = admin_audits(action="video.override", target_id="vid-e")
    assert audit.actor == admin_user.username and audit.outcome == "applied"
    assert (audit.params["visibility"], audit.params["reason"], audit.params["serviceVersion"]) == (
        "private", "legal hold", 1)
    [entry] = log_entries(VideoSnapshot, "vid-e")
    assert (entry.action_flag, entry.user_id) == (CHANGE, admin_user.pk)
    cached = cache.visibility_cache_get("vid-e")  # written through, not left at revision 1
    assert (cached["revision"], cached["visibility"]) == (2, "private")

    admin_client.post(url, video_form(override_visibility="private", override_status="taken_down", reason="spam"))
    assert VideoSnapshot.objects.get(pk="vid-e").version == 1
    assert len(admin_audits(action="video.override", target_id="vid-e")) == 2
    assert [e.action_flag for e in log_entries(VideoSnapshot, "vid-e")] == [CHANGE, CHANGE]


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_admin_saves_run_the_services_own_durable_transaction(admin_client, make_user, make_video, author):
    """Outside a test transaction, as in production: the admin must not wrap the service's durable
    transaction in one of its own (that raises RuntimeError), for saves and for deletes alike."""
    make_video("vid-t", author)
    resp = admin_client.post(reverse("admin:relations_videosnapshot_change", args=["vid-t"]),
                             video_form(override_visibility="friends", reason="test"))
    assert resp.status_code == 302
    snap = VideoSnapshot.objects.get(pk="vid-t")
    assert (snap.version, snap.visibility) == (1, "friends")

    other = make_user()
    admin_client.post(reverse("admin:relations_friendship_add"), {"user_a": author.pk, "user_b": other.pk})
    friendship = Friendship.objects.get()
    resp = admin_client.post(reverse("admin:relations_friendship_delete", args=[friendship.pk]), {"post": "yes"})
    assert resp.status_code == 302 and not Friendship.objects.exists()
    assert [a.action for a in admin_audits()] == ["video.override", "friendship.add", "friendship.remove"]


def test_videos_are_not_added_in_the_admin(admin_client, author):
    """Videos come from the video service (D50): the admin only overrides what it pushed."""
    url = reverse("admin:relations_videosnapshot_add")
    assert admin_client.get(url).status_code == 403
    assert admin_client.post(url, {"video_id": "vid-new", "author_id": author.pk, "visibility": "friends",
                                   "status": "active"}).status_code == 403
    assert not VideoSnapshot.objects.filter(pk="vid-new").exists()
    assert admin_audits() == []


def test_video_service_rejection_is_a_form_error(admin_client, make_video, author):
    make_video("vid-e", author)
    change = admin_client.post(reverse("admin:relations_videosnapshot_change", args=["vid-e"]),
                               video_form(override_visibility="private"))  # no reason
    assert change.status_code == 200
    assert "An operator override needs a reason" in change.content.decode()
    assert change.context["adminform"].form.non_field_errors()
    snap = VideoSnapshot.objects.get(pk="vid-e")
    assert (snap.version, snap.visibility, snap.override_visibility) == (1, "public", None)
    assert admin_audits() == []
    assert log_entries(VideoSnapshot, "vid-e") == []


def test_video_snapshots_cannot_be_deleted_in_the_admin(admin_client, make_video, author):
    make_video("vid-e", author)
    url = reverse("admin:relations_videosnapshot_delete", args=["vid-e"])
    assert admin_client.get(url).status_code == 403
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    changelist = admin_client.get(reverse("admin:relations_videosnapshot_changelist"))
    assert changelist.context["action_form"] is None  # no "delete selected" action either
    bulk = admin_client.post(reverse("admin:relations_videosnapshot_changelist"),
                             {"action": "delete_selected", "_selected_action": ["vid-e"], "post": "yes"})
    assert bulk.status_code in (200, 302)
    assert VideoSnapshot.objects.filter(pk="vid-e").exists()


def test_video_changelist_search_and_filters(admin_client, make_user, make_video, author):
    other = make_user()
    make_video("vid-pub", author)
    make_video("vid-priv", author, visibility="private")
    make_video("vid-other", other, status="taken_down")
    url = reverse("admin:relations_videosnapshot_changelist")

    def listed(params):
        resp = admin_client.get(url, params)
        assert resp.status_code == 200
        return sorted(v.video_id for v in resp.context["cl"].result_list)

    assert listed({"q": str(author.pk)}) == ["vid-priv", "vid-pub"]
    assert listed({"q": "vid-oth"}) == ["vid-other"]
    assert listed({"visibility__exact": "private"}) == ["vid-priv"]
    assert listed({"status__exact": "taken_down"}) == ["vid-other"]


# --- audit log and shard contract: read-only ---------------------------------------------------


def test_audit_admin_refuses_add_change_and_delete(admin_client, make_video, author):
    make_video("vid-e", author)  # writes an audit record (channel cli)
    record = AuditRecord.objects.get(target_id="vid-e")
    listing = admin_client.get(reverse("admin:audit_auditrecord_changelist"), {"channel": "cli"})
    assert listing.status_code == 200 and [r.pk for r in listing.context["cl"].result_list] == [record.pk]
    assert admin_client.get(reverse("admin:audit_auditrecord_changelist"),
                            {"q": "vid-e"}).context["cl"].result_count == 1

    assert admin_client.get(reverse("admin:audit_auditrecord_add")).status_code == 403
    assert admin_client.post(reverse("admin:audit_auditrecord_add"),
                             {"actor": "x", "channel": "admin", "action": "a", "target_type": "t",
                              "target_id": "1", "params": "{}", "outcome": "applied"}).status_code == 403
    change_url = reverse("admin:audit_auditrecord_change", args=[record.pk])
    assert admin_client.get(change_url).status_code == 200  # view only
    assert admin_client.post(change_url, {"actor": "forged"}).status_code == 403
    delete_url = reverse("admin:audit_auditrecord_delete", args=[record.pk])
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    record.refresh_from_db()
    assert record.actor == "tests"
    assert AuditRecord.objects.count() == 1


def test_shard_contract_admin_is_read_only(admin_client):
    contract = routing.active_contract()
    listing = admin_client.get(reverse("admin:relations_relationshardslot_changelist"))
    assert listing.status_code == 200
    assert listing.context["cl"].result_count == contract.logical_slots
    assert admin_client.get(reverse("admin:relations_relationshardcontract_add")).status_code == 403
    assert admin_client.get(reverse("admin:relations_relationshardslot_add")).status_code == 403
    change_url = reverse("admin:relations_relationshardcontract_change", args=[contract.version])
    assert admin_client.get(change_url).status_code == 200
    assert admin_client.post(change_url, {"hash_seed": "other"}).status_code == 403
    routing.reset_cache()
    assert routing.active_contract() == contract


# --- social edges ------------------------------------------------------------------------------


def test_friendship_add_in_either_order_is_audited(admin_client, admin_user, make_user):
    a, b = make_user(), make_user()
    low, high = sorted((a.pk, b.pk))
    cache.edge_cache_put(low, high, {"f": False, "b": False})
    add_url = reverse("admin:relations_friendship_add")

    resp = admin_client.post(add_url, {"user_a": high, "user_b": low, "_save": "Save"})
    assert resp.status_code == 302
    friendship = Friendship.objects.get()
    assert (friendship.user_low, friendship.user_high) == (low, high)
    [audit] = admin_audits(action="friendship.add")
    assert (audit.actor, audit.target_id, audit.outcome) == (admin_user.username, f"{low}:{high}", "applied")
    assert [e.action_flag for e in log_entries(Friendship, friendship.pk)] == [ADDITION]
    assert cache.edge_cache_get(low, high) is None  # invalidated by the service

    again = admin_client.post(add_url, {"user_a": low, "user_b": high, "_save": "Save"})
    assert again.status_code == 200 and "already friends" in again.content.decode()
    assert len(admin_audits(action="friendship.add")) == 1


def test_friendship_service_rejection_is_a_form_error(admin_client, make_user):
    a = make_user()
    resp = admin_client.post(reverse("admin:relations_friendship_add"), {"user_a": a.pk, "user_b": a.pk})
    assert resp.status_code == 200
    assert "A user cannot be their own friend." in resp.content.decode()
    assert not Friendship.objects.exists() and admin_audits() == []
    assert not LogEntry.objects.exists()

    unknown = admin_client.post(reverse("admin:relations_friendship_add"), {"user_a": a.pk, "user_b": 10**12})
    assert unknown.status_code == 200 and f"No user with id {10**12}." in unknown.content.decode()
    assert not Friendship.objects.exists()


def test_friendship_delete_goes_through_the_service(admin_client, make_user):
    a, b = make_user(), make_user()
    admin_client.post(reverse("admin:relations_friendship_add"), {"user_a": a.pk, "user_b": b.pk})
    friendship = Friendship.objects.get()
    assert admin_client.get(reverse("admin:relations_friendship_change", args=[friendship.pk])).status_code == 200
    assert admin_client.post(reverse("admin:relations_friendship_change", args=[friendship.pk]),
                             {"user_a": a.pk, "user_b": b.pk}).status_code == 403  # no edits in place

    resp = admin_client.post(reverse("admin:relations_friendship_delete", args=[friendship.pk]), {"post": "yes"})
    assert resp.status_code == 302
    assert not Friendship.objects.exists()
    [removed] = admin_audits(action="friendship.remove")
    assert removed.target_id == f"{friendship.user_low}:{friendship.user_high}" and removed.outcome == "applied"
    assert [e.action_flag for e in log_entries(Friendship, friendship.pk)] == [ADDITION, DELETION]


def test_block_add_and_bulk_delete_go_through_the_service(admin_client, make_user):
    blocker, blocked, other = make_user(), make_user(), make_user()
    add_url = reverse("admin:relations_block_add")
    for victim in (blocked, other):
        resp = admin_client.post(add_url, {"blocker_id": blocker.pk, "blocked_id": victim.pk, "_save": "Save"})
        assert resp.status_code == 302
    assert [a.target_id for a in admin_audits(action="block.add")] == [
        f"{blocker.pk}>{blocked.pk}", f"{blocker.pk}>{other.pk}"]

    self_block = admin_client.post(add_url, {"blocker_id": blocker.pk, "blocked_id": blocker.pk})
    assert self_block.status_code == 200 and "A user cannot block themselves." in self_block.content.decode()

    ids = list(Block.objects.values_list("pk", flat=True))
    assert admin_client.get(reverse("admin:relations_block_change", args=[ids[0]])).status_code == 200
    resp = admin_client.post(reverse("admin:relations_block_changelist"),
                             {"action": "delete_selected", "_selected_action": ids, "post": "yes"})
    assert resp.status_code == 302
    assert not Block.objects.exists()
    assert sorted(a.target_id for a in admin_audits(action="block.remove")) == sorted(
        [f"{blocker.pk}>{blocked.pk}", f"{blocker.pk}>{other.pk}"])
