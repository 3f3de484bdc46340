"""No admin action runs a long action inside the request: account deletion, the exports and the
rebuilds start ops jobs, answer at once with the job's page, and the job's progress advances slice by
slice on the workers."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from likes_project.audit.models import AuditRecord
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.tasks import run_job_task
from relations.models import AccountStatus, RelationCacheGeneration
from relations.services.commands import relation_set_state
from tests.factories import staff_client
from tests.opsconsole.helpers import liker_of_videos
from tests.relations.helpers import relation_row

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]


@pytest.fixture
def staff():
    return staff_client("jobs-staff")


def grant(user, *codenames: str) -> None:
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))


def slices_until_done(job_id: int) -> list[int]:
    """Run the job's task one slice at a time (as the workers would) and record its progress after each."""
    done = []
    for _ in range(200):
        run_job_task(job_id)
        job = OpsJob.objects.get(pk=job_id)
        done.append(job.done)
        if job.finished:
            return done
    raise AssertionError("the job did not finish")


def test_account_deletion_answers_at_once_and_its_job_progresses(staff, settings):
    user, client = staff
    grant(user, "change_accountstatus")
    doomed, videos = liker_of_videos("ja", 6)
    settings.OPS_JOB_SLICE_S = 0  # one chunk per slice
    settings.ACCOUNT_DELETE_CHUNK = 2

    resp = client.post("/admin/relations/account-delete/", {"username": doomed.username, "confirm": "on"})

    assert resp.status_code == 302
    job = OpsJob.objects.get()
    assert resp["Location"].endswith(f"/admin/opsjobs/opsjob/{job.pk}/change/")
    assert (job.kind, job.status, job.done) == ("account.delete", "QUEUED", 0)
    assert AccountStatus.objects.get(user_id=doomed.pk).status == "deleted"  # hidden at once ...
    assert all(relation_row(doomed.pk, v).state == "LIKED" for v in videos)  # ... the withdrawals are the job's
    page = client.get(resp["Location"]).content.decode()
    assert 'http-equiv="refresh"' in page and "account.delete" in page  # the page follows the job

    progress = slices_until_done(job.pk)
    assert progress == sorted(progress) and len(set(progress)) >= 3 and progress[-1] == 6
    job.refresh_from_db()
    assert (job.status, job.total, job.slices) == ("SUCCEEDED", 6, len(progress))
    assert all(relation_row(doomed.pk, v).state == "UNLIKED" for v in videos)
    assert 'http-equiv="refresh"' not in client.get(resp["Location"]).content.decode()
    assert set(AuditRecord.objects.filter(job_id=job.pk).values_list("action", flat=True)) == {
        "job.start", "account.delete", "account.delete.withdrawn", "job.finish"}


def test_the_rebuild_action_answers_at_once_and_its_job_progresses(staff, make_user, make_video, settings):
    user, client = staff
    grant(user, "view_relationcachegeneration", "rebuild_relation_cache")
    author = make_user()
    make_video("jr-1", author)
    for i in range(5):
        liker = make_user()
        relation_set_state(user_id=liker.pk, video_id="jr-1", desired_state="LIKED", operation_id=f"jr-{i}")
    old = RelationCacheGeneration.objects.get(status="ACTIVE").generation
    settings.OPS_JOB_SLICE_S = 0

    resp = client.post("/admin/relations/relationcachegeneration/", {
        "action": "rebuild_relation_cache", "_selected_action": [str(old)], "chunk": "1"})

    assert resp.status_code == 302
    job = OpsJob.objects.get()
    assert job.status == "QUEUED"
    assert RelationCacheGeneration.objects.get(pk=job.state["generation"]).status == "SHADOW"
    assert RelationCacheGeneration.objects.get(status="ACTIVE").generation == old  # nothing switched yet

    progress = slices_until_done(job.pk)
    assert progress == sorted(progress) and progress[-1] > 0
    assert OpsJob.objects.get(pk=job.pk).status == "SUCCEEDED"
    assert RelationCacheGeneration.objects.get(status="ACTIVE").generation == old + 1


def test_a_job_is_visible_to_who_may_start_it_and_to_nobody_else(staff, make_user):
    user, client = staff
    from likes_project.audit.services import Actor
    from likes_project.opsjobs.services import job_start

    doomed = make_user()
    job = job_start(kind="account.delete", actor=Actor("tests", "cli"), params={"user_id": doomed.pk})
    url = f"/admin/opsjobs/opsjob/{job.pk}/change/"
    assert client.get(url).status_code in (302, 403)
    grant(user, "change_accountstatus")
    assert client.get(url).status_code == 200
    assert client.get("/admin/opsjobs/opsjob/").status_code == 200


def test_a_command_with_async_leaves_the_job_to_the_workers_and_follows_it():
    """`--async` starts the job and only follows it: here the test plays the worker, in another thread."""
    import io
    import threading

    from django.core.management import call_command
    from django.db import connections

    doomed, _videos = liker_of_videos("jc", 3)
    out, err = io.StringIO(), io.StringIO()

    def command():
        try:
            call_command("delete_account", doomed.username, "--async", stdout=out, stderr=err)
        finally:
            for alias in connections:
                connections[alias].close()

    follower = threading.Thread(target=command)
    follower.start()
    job_id = None
    for _ in range(400):  # the command has started the job and is following it ...
        job_id = OpsJob.objects.filter(kind="account.delete").values_list("pk", flat=True).first()
        if job_id:
            break
        follower.join(0.05)
    assert job_id is not None and OpsJob.objects.get(pk=job_id).status == "QUEUED"
    assert all(relation_row(doomed.pk, f"jc-{i}").state == "LIKED" for i in range(3))  # ... not running it
    run_job_task(job_id)  # the worker
    follower.join(30)
    assert not follower.is_alive()
    assert f"job {job_id} (account.delete) started on the workers" in err.getvalue()
    assert "3 of 3 likes withdrawn" in out.getvalue()
    assert all(relation_row(doomed.pk, f"jc-{i}").state == "UNLIKED" for i in range(3))
