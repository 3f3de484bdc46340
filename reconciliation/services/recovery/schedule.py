"""The snapshot schedule (issue 12 §5), run by Celery beat: each entry starts an ops job on the workers
unless one of its kind is still going. `likes_snapshot_*` gauges (observability) read what they left."""

from __future__ import annotations

from likes_project.audit.services import system_actor
from likes_project.opsjobs.models import JobStatus, OpsJob
from reconciliation.models import RecoverySnapshot, SnapshotStatus

_PENDING = (JobStatus.QUEUED, JobStatus.RUNNING)


def _start(kind: str, params: dict, target: str, name: str) -> dict:
    from likes_project.opsjobs.services import job_start

    if OpsJob.objects.filter(kind=kind, status__in=_PENDING).exists():
        return {"status": "previous_running"}
    job = job_start(kind=kind, actor=system_actor(f"schedule:{name}"), params=params, target=target)
    return {"status": "started", "jobId": job.pk}


def snapshot_scheduled() -> dict:
    from reconciliation.jobs import SNAPSHOT_JOB

    return _start(SNAPSHOT_JOB, {"reason": "scheduled (SNAPSHOT_INTERVAL_S)"}, "scheduled snapshot",
                  "recovery-snapshot")


def test_restore_scheduled() -> dict:
    from reconciliation.jobs import SNAPSHOT_TEST_JOB

    latest = RecoverySnapshot.objects.filter(status=SnapshotStatus.SEALED).order_by("-id").first()
    if latest is None:
        return {"status": "no_sealed_snapshot"}
    return _start(SNAPSHOT_TEST_JOB, {"snapshotId": latest.pk}, f"test-restore of snapshot {latest.pk}",
                  "recovery-snapshot-test-restore")
