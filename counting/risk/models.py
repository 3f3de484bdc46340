"""The risk ledger (RISK-3 … RISK-5, REC-2, OPS-6), on `default`.

`RiskDecision` is the append-only ledger: one row per hide or restore decision over a set of relations
of one video, with its reason, evidence, requester and approver (maker-checker, bound to the hash of
its parameters). A decision's row only moves through its statuses; a restore is a new decision.
`RiskRelationState` is what the ledger projects per (video, user): hidden or not, at the risk version
(the approval sequence) of the decision that last set it; an older decision's run never overwrites a
newer one's. The relation facts and the count projection rows are never changed by either."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from likes_project.model_kit import ApprovalRequest, approval_checks, approval_permissions


class RiskKind(models.TextChoices):
    HIDE = "HIDE"
    RESTORE = "RESTORE"
    ACCOUNT = "ACCOUNT"  # an account's level: down-weight, freeze, or clear (issue 32 §1)


class RiskStatus(models.TextChoices):
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    APPROVED = "APPROVED"  # approved; the system's job will apply it
    APPLYING = "APPLYING"
    APPLIED = "APPLIED"
    RESTORED = "RESTORED"  # a hide whose restore was applied
    REJECTED = "REJECTED"
    FAILED = "FAILED"


# A hide in these statuses stands: its users are hidden (a restore of another hide keeps them hidden).
STANDING = (RiskStatus.APPROVED, RiskStatus.APPLYING, RiskStatus.APPLIED)
FINISHED = (RiskStatus.APPLIED, RiskStatus.RESTORED, RiskStatus.REJECTED, RiskStatus.FAILED)


class RiskDecision(ApprovalRequest):
    """One hide or restore decision. `params` (kind, video, users, reason, evidence, restores) hash to
    `params_hash`; the approval records the hash it approved. The database refuses an approval by the
    requester and an approval of other parameters than the request's."""

    finished_statuses = FINISHED

    kind = models.CharField(max_length=8, choices=RiskKind.choices)
    video_id = models.CharField(max_length=64)
    restores = models.BigIntegerField(null=True, blank=True)  # the hide a restore decision restores
    evidence = models.TextField(blank=True, default="")
    requested_channel = models.CharField(max_length=16)
    rejected_by = models.CharField(max_length=150, blank=True, default="")
    status = models.CharField(max_length=20, choices=RiskStatus.choices, default=RiskStatus.AWAITING_APPROVAL)
    risk_version = models.BigIntegerField(null=True, blank=True)  # from risk_version_seq, at approval
    applied_users = models.PositiveIntegerField(default=0)

    class Meta(ApprovalRequest.Meta):
        constraints = [
            *approval_checks("risk"),
            models.CheckConstraint(condition=Q(kind="HIDE", restores__isnull=True)
                                   | Q(kind="RESTORE", restores__isnull=False) | Q(kind="ACCOUNT"),
                                   name="risk_restore_names_hide"),
            # An account's level names no video and restores nothing (issue 32 §1).
            models.CheckConstraint(condition=~Q(kind="ACCOUNT") | Q(video_id="", restores__isnull=True),
                                   name="risk_account_names_no_video"),
        ]
        indexes = [models.Index(fields=["video_id", "kind", "status"], name="risk_video_idx")]
        permissions = approval_permissions("riskdecision", "risk hide or restore")

    def __str__(self) -> str:
        return f"risk {self.pk}: {self.kind} {len(self.user_ids)} users on {self.video_id} ({self.status})"

    @property
    def user_ids(self) -> list[int]:
        return [int(u) for u in self.params.get("users", [])]


class RiskRelationState(models.Model):
    """The ledger's projection per (video, user): hidden while a standing hide covers it. Written only
    by the apply job, version-guarded by `risk_version`."""

    video_id = models.CharField(max_length=64)
    user_id = models.BigIntegerField()
    hidden = models.BooleanField()
    risk_version = models.BigIntegerField()
    decision_id = models.BigIntegerField()  # the decision that set it last
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["video_id", "user_id"], name="uniq_risk_relation")]
        indexes = [models.Index(fields=["video_id", "user_id"], condition=Q(hidden=True),
                                name="risk_hidden_idx")]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.video_id} {'hidden' if self.hidden else 'shown'} rv{self.risk_version}"


class VerdictStatus(models.TextChoices):
    APPLIED = "APPLIED"  # applied on its own (a ring no bigger than RISK_AUTO_MAX_USERS)
    AWAITING_APPROVAL = "AWAITING_APPROVAL"  # a bigger ring: its decisions wait for an operator


class RiskVerdict(models.Model):
    """What the asynchronous scorer (`counting.risk.scorer`, issue 32 §1) concluded about one account: its score,
    each named signal with its evidence, the level it asked for, and the decision that carries it (applied on its
    own, or waiting for an operator). Written once per raise of an account's level; read in the console."""

    user_id = models.BigIntegerField(db_index=True)
    level = models.CharField(max_length=10)
    score = models.IntegerField()
    signals = models.JSONField(default=dict)
    decision_id = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(max_length=20, choices=VerdictStatus.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"verdict {self.pk}: user {self.user_id} {self.level} (score {self.score}, {self.status})"
