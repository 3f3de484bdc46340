"""What the reconciliation tests share: a video with likes published and projected, damage injected by
hand in SQL on one layer, and runs of each mode through the same job a command starts."""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import io
import json
import threading
import uuid

import psycopg
import pytest
from django.apps import apps as django_apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.db.models import F
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from counting import routing as count_routing
from counting import selectors as count_selectors
from counting.models import LikeCountProjection, VideoDisplayCount, VideoLikeCountVbucket
from counting.services import snapshots
from likes_project import l1cache
from likes_project.audit.models import AuditRecord
from likes_project.audit.services import Actor
from likes_project.opsjobs.services import job_run_inline, job_start
from reconciliation.jobs import SNAPSHOT_JOB, job_for_mode
from reconciliation.models import CheckRun
from reconciliation.services import checks
from reconciliation.services.recovery import snapshot
from relations.models import LikeCommand, LikeRelation, OutboxEvent
from tests.counting.helpers import drain
from tests.factories import make_user, put_like
from tests.relations.helpers import cmd, total

OPERATOR = Actor(name="tests-operator", channel="cli")

# The database marks of a module whose tests drive the stores from other threads too (a `Background` worker,
# a live server's): every alias, committed for real, and the connections those threads opened closed after
# each test. A module names its pass markers beside them: `pytestmark = [pytest.mark.topology, *LIVE_STORES]`.
LIVE_STORES = (pytest.mark.django_db(databases="__all__", transaction=True),
               pytest.mark.usefixtures("close_db_connections"))


def liked_video(make_user, make_video, video_id: str, likes: int):
    """A video with `likes` likes, published, projected and displayed."""
    video = make_video(video_id, make_user())
    users = [make_user() for _ in range(likes)]
    for u in users:
        cmd(u, video.video_id, "LIKED")
    drain()
    snapshots.display_snapshot_refresh()
    return video, users


def run_check(mode: str, *, videos: list[str] | None = None, all_videos: bool = False) -> CheckRun:
    """A run of `mode`, as `manage.py reconcile` starts it (an ops job, run here to its end)."""
    scope = checks.scope_normalize(videos=videos, all_videos=all_videos)
    job = job_start(kind=job_for_mode(mode), actor=OPERATOR, params={"mode": mode, "scope": scope})
    job = job_run_inline(job.pk)
    return CheckRun.objects.get(pk=job.params["runId"])


def bucket_of(user_id: int, video_id: str) -> tuple[str, int]:
    """(count partition alias, virtual bucket) holding this relation."""
    gen = count_routing.load_generation()
    vb = count_routing.virtual_bucket(gen.space, video_id, user_id)
    return gen.routes[vb].partition, vb


def sql(alias: str, statement: str, params: list) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.rowcount


def bucket_add(user_id: int, video_id: str, delta: int) -> None:
    """Damage by hand: add `delta` to the bucket holding this relation."""
    alias, vb = bucket_of(user_id, video_id)
    assert sql(alias, f"UPDATE {VideoLikeCountVbucket._meta.db_table} SET active_count = active_count + %s "
                      "WHERE video_id = %s AND virtual_bucket = %s", [delta, video_id, vb]) == 1


def projection_delete(user_id: int, video_id: str) -> None:
    """Damage by hand: the projection loses a LIKED relation, and its bucket the like (identity holds)."""
    alias, _vb = bucket_of(user_id, video_id)
    assert sql(alias, f"DELETE FROM {LikeCountProjection._meta.db_table} WHERE user_id = %s AND video_id = %s",
               [user_id, video_id]) == 1
    bucket_add(user_id, video_id, -1)


def shards() -> list[str]:
    return list(settings.RELATION_SHARD_ALIASES)


# --- added for the exact, repair, command and schedule tests ----------------------------------------

REQUESTER = Actor(name="tests-requester", channel="cli")
APPROVER = Actor(name="tests-approver", channel="cli")


def api_like(api, user, video_id: str, desired: str = "LIKED", key: str | None = None):
    """The like command through the real API (PUT /v1/videos/<id>/like-relation) as `user`."""
    return put_like(api.as_user(user), video_id, desired, key or uuid.uuid4().hex)


def api_liked_video(api, make_user, make_video, video_id: str, likes: int):
    """A video with `likes` likes acknowledged by the API (each a 200), published, projected and
    displayed. Returns (video, users)."""
    video = make_video(video_id, make_user())
    users = [make_user() for _ in range(likes)]
    for u in users:
        resp = api_like(api, u, video_id)
        assert resp.status_code == 200, resp.content
    drain()
    snapshots.display_snapshot_refresh()
    return video, users


def facts_liked(video_id: str) -> set[int]:
    """The users whose relation with the video is LIKED, straight from every relation shard."""
    return {u for alias in settings.RELATION_SHARD_ALIASES
            for u in LikeRelation.objects.using(alias).filter(video_id=video_id, state="LIKED")
            .values_list("user_id", flat=True)}


def shard_writes(user_id: int, video_id: str) -> tuple[int, int, int]:
    """(relation rows, command rows, outbox rows) this user's like of this video left on the shards."""
    return (total(LikeRelation, user_id=user_id, video_id=video_id),
            total(LikeCommand, user_id=user_id, video_id=video_id),
            total(OutboxEvent, aggregate_key=f"{user_id}:{video_id}"))


def displayed(video_id: str) -> int:
    """The display count a reader gets after the snapshot job ran (the process's L1 emptied first, so
    the Redis view or the durable snapshot answers)."""
    snapshots.display_snapshot_refresh()
    l1cache.clear_all()
    return count_selectors.display_count_get(video_id=video_id).display_count


def counts_match_the_facts(videos) -> None:
    """Each video's displayed count equals its LIKED facts, and an exact run over every video PASSES."""
    for v in videos:
        assert displayed(v) == len(facts_liked(v)), v
    run = run_check("exact", all_videos=True)
    assert run.status == "PASSED", (run.status, run.refused_because)


def projection_rows(video_id: str) -> dict[int, tuple[str, int, object]]:
    """user -> (state, version, updated_at) of the active generation's projection rows of the video."""
    gen = count_routing.load_generation()
    out = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        for u, s, v, at in LikeCountProjection.objects.using(alias).filter(
                generation=gen.generation, video_id=video_id).values_list(
                "user_id", "projected_state", "projected_version", "updated_at"):
            out[u] = (s, v, at)
    return out


def bucket_freeze(user_id: int, video_id: str) -> None:
    """Damage by hand: the bucket holding this relation is frozen (as after a negative attempt)."""
    alias, vb = bucket_of(user_id, video_id)
    assert sql(alias, f"UPDATE {VideoLikeCountVbucket._meta.db_table} SET frozen = true "
                      "WHERE video_id = %s AND virtual_bucket = %s", [video_id, vb]) == 1


def projection_phantom(user_id: int, video_id: str, *, version: int = 1) -> None:
    """Damage by hand: a LIKED projection row no relation fact has, with its bucket incremented (so the
    identity still holds)."""
    gen = count_routing.load_generation()
    alias, vb = bucket_of(user_id, video_id)
    sql(alias, f"INSERT INTO {LikeCountProjection._meta.db_table} (generation, user_id, video_id, projected_state, "
               "projected_version, bucket_space_version, virtual_bucket, updated_at) "
               "VALUES (%s, %s, %s, 'LIKED', %s, %s, %s, now())",
        [gen.generation, user_id, video_id, version, gen.space.version, vb])
    n = sql(alias, f"UPDATE {VideoLikeCountVbucket._meta.db_table} SET active_count = active_count + 1 "
                   "WHERE generation = %s AND video_id = %s AND virtual_bucket = %s", [gen.generation, video_id, vb])
    if n == 0:
        sql(alias, f"INSERT INTO {VideoLikeCountVbucket._meta.db_table} (generation, video_id, virtual_bucket, "
                   "bucket_space_version, active_count, bucket_version, frozen, updated_at) "
                   "VALUES (%s, %s, %s, %s, 1, 1, false, now())", [gen.generation, video_id, vb, gen.space.version])


def projection_set_version(user_id: int, video_id: str, version: int, state: str | None = None) -> None:
    """Damage by hand: the projection row of this relation claims `version` (and `state`)."""
    alias, _vb = bucket_of(user_id, video_id)
    assert sql(alias, f"UPDATE {LikeCountProjection._meta.db_table} SET projected_version = %s, "
                      "projected_state = COALESCE(%s, projected_state) WHERE user_id = %s AND video_id = %s",
               [version, state, user_id, video_id]) == 1


def display_add(video_id: str, delta: int) -> None:
    """Damage by hand: the durable display snapshot says `delta` more than its buckets."""
    assert VideoDisplayCount.objects.filter(video_id=video_id).update(
        raw_active_count=F("raw_active_count") + delta, display_count=F("display_count") + delta) == 1


def bucket_versions(video_id: str) -> dict[tuple[str, int], tuple[int, int, bool]]:
    """(partition, bucket) -> (active_count, bucket_version, frozen) of the video's buckets."""
    gen = count_routing.load_generation()
    return {(alias, vb): (n, ver, frozen) for alias in settings.COUNT_PARTITION_ALIASES
            for vb, n, ver, frozen in VideoLikeCountVbucket.objects.using(alias).filter(
                generation=gen.generation, video_id=video_id).values_list(
                "virtual_bucket", "active_count", "bucket_version", "frozen")}


# --- the commands ---------------------------------------------------------------------------------


class Ran:
    """What one management command did: stdout, stderr, the exit status, and its JSON last line."""

    def __init__(self, out: str, err: str, code: int):
        self.out, self.err, self.code = out, err, code

    @property
    def json(self) -> dict:
        lines = [line for line in self.out.splitlines() if line.strip()]
        assert lines, (self.out, self.err)
        return json.loads(lines[-1])


def manage(*argv) -> Ran:
    """`manage.py <argv>` in this process; a CommandError becomes the exit status it carries."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(*argv, stdout=out, stderr=err)
    except CommandError as exc:
        err.write(str(exc))
        return Ran(out.getvalue(), err.getvalue(), exc.returncode)
    return Ran(out.getvalue(), err.getvalue(), 0)


def roles_ensure() -> None:
    """The console's role groups (likes-viewer, likes-operator, likes-approver) with every permission the
    migrations grant them, as those migrations make them (a transactional test's flush empties
    auth_group; the migrations' own functions put them back). One list: a migration that grants a role
    something adds its module here."""
    for module, function in ROLE_MIGRATIONS:
        getattr(importlib.import_module(module), function)(django_apps, None)


ROLE_MIGRATIONS = [
    ("opsconsole.migrations.0001_squashed_0005", "roles"),
]


def logged_in(username: str, *groups: str, superuser: bool = False):
    """A staff user (or a superuser) in the console's role groups (ensured first; idempotent), and a test
    client logged in as them."""
    roles_ensure()
    User = get_user_model()
    user = (User.objects.create_superuser(username, password="pw") if superuser else
            User.objects.create_user(username, password="pw", is_staff=True))
    user.groups.add(*Group.objects.filter(name__in=groups))
    assert user.groups.count() == len(groups)
    client = Client()
    client.force_login(user)
    return user, client


def assert_read_only(client, row, change: dict) -> None:
    """The console refuses (403) `client` every write to `row`'s table: the add page, a change of `row` (posting
    `change`) and its deletion. Ledgers and logs are read-only in the admin, for a superuser too."""
    admin_name = f"admin:{row._meta.app_label}_{row._meta.model_name}"
    assert client.get(reverse(f"{admin_name}_add")).status_code == 403
    assert client.post(reverse(f"{admin_name}_change", args=[row.pk]), change).status_code == 403
    assert client.post(reverse(f"{admin_name}_delete", args=[row.pk]), {"post": "yes"}).status_code == 403


def audits(action: str, **filters) -> list[AuditRecord]:
    """The audit records of `action` (narrowed by `filters`), oldest first."""
    return list(AuditRecord.objects.filter(action=action, **filters).order_by("id"))


def shown_messages(response) -> list[str]:
    """The messages framework's messages a console response shows."""
    return [str(m) for m in response.context["messages"]]


def member_of(group: str, username: str | None = None):
    """A user in `group` (the roles are ensured first)."""
    roles_ensure()
    user = make_user(username)
    user.groups.add(Group.objects.get(name=group))
    return user


# --- concurrency ----------------------------------------------------------------------------------


def wait_until(condition, *, timeout_s: float = 20.0, what: str = "condition"):
    """Poll `condition()` until it is truthy; fail after `timeout_s` (a bound, not a timing claim)."""
    from tests.drills import wait_for

    return wait_for(condition, timeout_s=timeout_s, what=what)


class Background:
    """Run `fn` in a thread with its own database connections (closed when it ends); `join()` re-raises
    what it raised and returns what it returned."""

    def __init__(self, fn, *args, **kwargs):
        self.result = None
        self.error: BaseException | None = None

        def body():
            try:
                self.result = fn(*args, **kwargs)
            except BaseException as exc:
                self.error = exc
            finally:
                connections.close_all()

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def join(self, timeout_s: float = 60.0):
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "background thread did not finish"
        if self.error is not None:
            raise self.error
        return self.result


@contextlib.contextmanager
def job_worker():
    """A worker thread running the real ops-job task over every QUEUED job until the block ends (what
    the Celery workers do; tests have none)."""
    from likes_project.opsjobs.models import OpsJob
    from likes_project.opsjobs.tasks import run_job_task

    stop = threading.Event()

    def loop():
        while not stop.is_set():
            for pk in list(OpsJob.objects.filter(status="QUEUED").order_by("pk").values_list("pk", flat=True)):
                run_job_task(pk)
            stop.wait(0.05)

    worker = Background(loop)
    try:
        yield
    finally:
        stop.set()
        worker.join()


@contextlib.contextmanager
def shard_transaction_holding(alias: str, statement: str, params: list):
    """A raw psycopg connection to the shard `alias` inside BEGIN, having run `statement` (say, the
    shared advisory lock a like command takes), kept open until the block ends."""
    conn_params = connections[alias].get_connection_params()
    conn_params.pop("cursor_factory", None)
    conn_params.pop("context", None)
    with psycopg.connect(**conn_params, autocommit=False) as conn:
        with conn.cursor() as cursor:
            cursor.execute(statement, params)
        try:
            yield conn
        finally:
            conn.rollback()


def finished_long_ago(run: CheckRun, seconds: float) -> None:
    CheckRun.objects.filter(pk=run.pk).update(finished_at=timezone.now() - dt.timedelta(seconds=seconds))


def snapshot_take(reason: str = "test"):
    """A recovery snapshot as `manage.py snapshot_create` takes it (its ops job, run here to its end)."""
    job = job_run_inline(job_start(kind=SNAPSHOT_JOB, actor=OPERATOR, params={"reason": reason}).pk)
    return snapshot.snapshot_get(job.params["snapshotId"])
