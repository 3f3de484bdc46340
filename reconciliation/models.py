"""Reconciliation runs and their diffs, and repair requests with their maker-checker approval (spec
§4.15 REC-1 … REC-8, §4.16 REPAIR-1, 3, 4, 6; issue 11). All on `default`.

A check run proves (or fails to prove) that one layer of the count pipeline agrees with the one below
it, for a scope, at recorded watermarks (REC-7). A diff is one disagreement it found, with a workflow
(NEW -> FIXING -> FIXED or IGNORED) whose every change is kept. A repair request names videos and the
source to rebuild them from; it runs only once a second person approved exactly its parameters.
"""

from __future__ import annotations

from django.db import models

from likes_project.generations import GenerationModel
from likes_project.model_kit import ApprovalRequest, FinishedByStatus, approval_checks, approval_permissions
from likes_project.switches import GlobalPauseSwitch


class RunMode(models.TextChoices):
    IDENTITY = "identity"  # REC-1: projection LIKED rows = Σ vbuckets, per (video, bucket)
    COVERAGE = "coverage"  # REC-3/4: every source relation is covered by the projection, by version
    EXACT = "exact"  # REC-5: exact equality under a coordinated write / outbox / consumer barrier


class RunStatus(models.TextChoices):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    PASSED = "PASSED"
    FAILED = "FAILED"
    REFUSED = "REFUSED"  # a barrier could not be established or held: nothing was proven


FINISHED_RUN_STATUSES = (RunStatus.PASSED, RunStatus.FAILED, RunStatus.REFUSED)


class RunKind(models.TextChoices):
    MANUAL = "manual"
    SCHEDULED = "scheduled"
    AFTER_REPAIR = "after_repair"
    AFTER_MIGRATION = "after_migration"


class CheckRun(FinishedByStatus, models.Model):
    """One reconciliation run. `scope` is `{"videos": [...]}`, `{"all": true}` or
    `{"bucketRange": [low, high]}`; `watermarks` what it was measured against (REC-7: source shard
    watermarks, the count offset vector, bucket-space version, projection generation, manifest id);
    `checkpoint` its resumable cursor; `skipped` the videos it could not judge, and why."""

    finished_statuses = FINISHED_RUN_STATUSES

    kind = models.CharField(max_length=16, choices=RunKind.choices, default=RunKind.MANUAL)
    mode = models.CharField(max_length=10, choices=RunMode.choices)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.QUEUED)
    schedule = models.CharField(max_length=64, blank=True, default="")  # the beat entry that started it
    scope = models.JSONField(default=dict)
    watermarks = models.JSONField(default=dict, blank=True)
    checked = models.BigIntegerField(default=0)
    diffs_found = models.PositiveIntegerField(default=0)
    diffs_fixed = models.PositiveIntegerField(default=0)
    skipped = models.JSONField(default=list, blank=True)
    checkpoint = models.JSONField(default=dict, blank=True)
    total = models.BigIntegerField(null=True, blank=True)
    barrier_held_ms = models.FloatField(null=True, blank=True)
    refused_because = models.CharField(max_length=512, blank=True, default="")
    actor = models.CharField(max_length=150)
    channel = models.CharField(max_length=16)
    job_id = models.BigIntegerField(null=True, blank=True)
    repair_id = models.BigIntegerField(null=True, blank=True)  # the repair this run verified
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["schedule", "status", "finished_at"], name="checkrun_schedule_idx")]
        permissions = [("run_check", "Can start reconciliation runs")]

    def __str__(self) -> str:
        return f"check run {self.pk} {self.mode} ({self.status})"


class DiffLayer(models.TextChoices):
    DISPLAY = "display", "display snapshot vs buckets"
    COUNT_CACHE = "count_cache", "count cache vs buckets"
    BUCKETS = "buckets", "buckets vs projection"
    PROJECTION = "projection", "projection vs facts"
    POLICY_HIDDEN = "policy_hidden", "policy-hidden count vs accounts' levels"


class DiffStatus(models.TextChoices):
    NEW = "NEW"
    FIXING = "FIXING"
    FIXED = "FIXED"
    IGNORED = "IGNORED"


# The workflow: which status may follow which (reconciliation.services.diffs enforces it).
DIFF_TRANSITIONS = {
    DiffStatus.NEW: (DiffStatus.FIXING, DiffStatus.IGNORED, DiffStatus.FIXED),  # FIXED: by a repair of its video
    DiffStatus.FIXING: (DiffStatus.FIXED, DiffStatus.NEW, DiffStatus.IGNORED),
    DiffStatus.FIXED: (),
    DiffStatus.IGNORED: (DiffStatus.NEW,),
}


class CheckDiff(models.Model):
    """One disagreement: on `video_id` (and `virtual_bucket` for the bucket layer), layer `layer` says
    `actual` where the layer below it says `expected`. `detail` holds the evidence (for the projection
    layer, the relations that disagree, with both versions and states)."""

    run = models.ForeignKey(CheckRun, on_delete=models.PROTECT, related_name="diffs")
    video_id = models.CharField(max_length=64)
    virtual_bucket = models.PositiveIntegerField(null=True, blank=True)
    layer = models.CharField(max_length=16, choices=DiffLayer.choices)
    expected = models.BigIntegerField()
    actual = models.BigIntegerField()
    detail = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=8, choices=DiffStatus.choices, default=DiffStatus.NEW)
    owner = models.CharField(max_length=150, blank=True, default="")
    reason = models.CharField(max_length=512, blank=True, default="")
    status_changed_at = models.DateTimeField(null=True, blank=True)
    repair_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["video_id", "status"], name="checkdiff_video_idx")]
        permissions = [("triage_diff", "Can take, fix or ignore reconciliation diffs")]

    def __str__(self) -> str:
        where = f" vb {self.virtual_bucket}" if self.virtual_bucket is not None else ""
        return f"diff {self.pk} {self.video_id}{where} {self.layer}: {self.actual} != {self.expected} ({self.status})"


class DiffTransition(models.Model):
    """Every status change of a diff: who, why, when (append-only)."""

    diff = models.ForeignKey(CheckDiff, on_delete=models.PROTECT, related_name="transitions")
    from_status = models.CharField(max_length=8)
    to_status = models.CharField(max_length=8)
    actor = models.CharField(max_length=150)
    reason = models.CharField(max_length=512, blank=True, default="")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"diff {self.diff_id}: {self.from_status} -> {self.to_status} by {self.actor}"


class RepairStatus(models.TextChoices):
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    APPROVED = "APPROVED"  # approved; the system runs it (a job)
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    VOID = "VOID"  # its parameters no longer hash to what was approved: it needs a new request


FINISHED_REPAIR_STATUSES = (RepairStatus.SUCCEEDED, RepairStatus.FAILED, RepairStatus.VOID)


class RepairRequest(ApprovalRequest):
    """A repair from the facts (REPAIR-1, REPAIR-3, REPAIR-6). `params` (videos, source, reason, the
    motivating diffs) hash to `params_hash`; an approval records the hash it approved, and the executor
    runs only while the parameters still hash to it. The database refuses an approval by the requester
    and an approval of other parameters than the request's."""

    finished_statuses = FINISHED_REPAIR_STATUSES

    requested_channel = models.CharField(max_length=16)
    status = models.CharField(max_length=20, choices=RepairStatus.choices, default=RepairStatus.AWAITING_APPROVAL)
    watermarks_before = models.JSONField(default=dict, blank=True)
    watermarks_after = models.JSONField(default=dict, blank=True)
    before = models.JSONField(default=dict, blank=True)  # per video: each layer's value before
    after = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    verify_run_id = models.BigIntegerField(null=True, blank=True)  # the exact run after the repair

    class Meta(ApprovalRequest.Meta):
        constraints = approval_checks("repair")
        permissions = approval_permissions("repair", "count repair")

    def __str__(self) -> str:
        return f"repair {self.pk} ({self.status}) of {len(self.params.get('videos', []))} videos"

    @property
    def video_ids(self) -> list[str]:
        return list(self.params.get("videos", []))


class SnapshotStatus(models.TextChoices):
    BUILDING = "BUILDING"
    SEALED = "SEALED"  # every SNAP-10 condition held when it was sealed (INV-16)
    FAILED = "FAILED"  # the cut or an artifact failed; the reason is kept; never used for replay
    EXPIRED = "EXPIRED"  # pruned by the retention policy: its artifacts are deleted


class RecoverySnapshot(models.Model):
    """A recovery-consistent snapshot of the count projection (spec §4.9 SNAP-4 … SNAP-11; issue 12):
    the full projection and vbucket tables of one generation, one artifact of each per count partition,
    taken at an exact cut of the event log. `offsets` is the whole vector, one entry per partition of
    the topic (a partition with no new messages too): `{"topic", "partition", "through", "nextOffset"}`
    where every entry up to `through` is in the snapshot and none from `nextOffset` on is (SNAP-4).
    `artifacts` are `{"kind", "partition", "uri", "rows", "sha256", "bytes"}`."""

    status = models.CharField(max_length=10, choices=SnapshotStatus.choices, default=SnapshotStatus.BUILDING)
    reason = models.CharField(max_length=512, blank=True, default="")
    started_by = models.CharField(max_length=150)
    channel = models.CharField(max_length=16, blank=True, default="")
    bucket_space_version = models.PositiveIntegerField(null=True, blank=True)
    generation = models.PositiveIntegerField(null=True, blank=True)
    manifest_id = models.BigIntegerField(null=True, blank=True)
    stream_contract_version = models.PositiveIntegerField(null=True, blank=True)
    offsets = models.JSONField(default=list, blank=True)
    artifacts = models.JSONField(default=list, blank=True)
    dead_letters_at_cut = models.JSONField(default=list, blank=True)  # count dead letters open at the cut
    dispatch_paused_ms = models.FloatField(null=True, blank=True)
    timings = models.JSONField(default=dict, blank=True)  # step -> milliseconds
    failure = models.CharField(max_length=1024, blank=True, default="")
    job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sealed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The last test-restore into a scratch generation (the daily drill): when, and its verdict.
    tested_at = models.DateTimeField(null=True, blank=True)
    test_result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-id"]
        permissions = [("create_snapshot", "Can take, verify and test-restore recovery snapshots")]

    def __str__(self) -> str:
        return f"snapshot {self.pk} ({self.status}) of generation {self.generation}"


class RecoveryRestore(GenerationModel):
    """One restore of a recovery snapshot as a run of the generation lifecycle (issue 29 §6): the
    lease, its renewal, the reclaim of a dead run, the time limit and the audit records are the
    lifecycle's. Its `generation` numbers the restores; what it builds is the count projection
    generation `count_generation` (SHADOW, then ACTIVE at the switch, or RETIRED at once when the
    restore fails or is a test-restore). ACTIVE here means the last restore that was switched in (a
    later restore retires it; a bucket-space change does not touch it). A test-restore (`scratch`) is a
    dry run: verified, then RETIRED, never switched in."""

    snapshot_id = models.BigIntegerField()
    count_generation = models.PositiveIntegerField(unique=True)
    replaced_generation = models.PositiveIntegerField()  # the ACTIVE count generation when it started
    scratch = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(GenerationModel.Meta):
        pass

    def __str__(self) -> str:
        return (f"restore {self.generation} of snapshot {self.snapshot_id} into count generation "
                f"{self.count_generation} ({self.status})")


class AutoRepairSwitch(GlobalPauseSwitch):
    """Pause auto-repair (issue 14 §3): while set, check runs still record every diff but fix none by
    themselves (a count-cache diff stays NEW until the switch is cleared and a run finds it again, or
    an operator fixes it). One row, key "global"."""

    switch_kind = "auto-repair"
    switch_audit = ("reconcile.auto_repair_", "reconciliation")
    switch_key_help = "no key (every check run)"
    switch_states = ("paused", "on")

    class Meta:
        verbose_name, verbose_name_plural = "auto-repair switch", "auto-repair switches"
