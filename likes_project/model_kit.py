"""Model pieces several apps' models share. Importable from any models module: Django only, no services.

- `requester_not_approver` / `approval_checks`: the database's half of two-person approval
  (`likes_project.approvals`): the approver is never the requester, and an approval binds the hash of the
  parameters it approved. One check per table, named after the table's prefix, so the constraint names
  (and the schema) stay what each table had.
- `approval_permissions`: the two permissions of such a request, `request_<codename>` and `approve_<codename>`.
- `ApprovalRequest`: the columns of such a request (a repair, a risk decision, a subscription's replay): its
  parameters and their hash, who asked and why, the approval, the ops job that ran it and how it ended.
- `FinishedByStatus`: `finished`, for a row whose `status` ends in one of its `finished_statuses`.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import F, Q


def requester_not_approver(prefix: str) -> models.CheckConstraint:
    """`<prefix>_not_approved_by_requester`: a row's approver, once set, is not its requester."""
    return models.CheckConstraint(condition=Q(approved_by="") | ~Q(approved_by=F("requested_by")),
                                  name=f"{prefix}_not_approved_by_requester")


def approval_checks(prefix: str) -> list[models.CheckConstraint]:
    """The checks of a request approved by its parameters' hash (a repair, a risk decision): not by its
    requester, and `<prefix>_approval_bound_to_params`, the approved hash is the requested one."""
    return [
        requester_not_approver(prefix),
        models.CheckConstraint(condition=Q(approved_by="") | Q(approved_hash=F("params_hash")),
                               name=f"{prefix}_approval_bound_to_params"),
    ]


def approval_permissions(codename: str, what: str) -> list[tuple[str, str]]:
    """The permission pair of a two-person request: `request_<codename>` ("Can request a <what>") and
    `approve_<codename>` ("Can approve another operator's <what>")."""
    return [(f"request_{codename}", f"Can request a {what}"),
            (f"approve_{codename}", f"Can approve another operator's {what}")]


class FinishedByStatus:
    """A row that is done once its `status` is one of `finished_statuses` (an ops job, a check run, an approved
    request): what a `--wait`, a console page's refresh or a job's next slice asks of it."""

    finished_statuses: ClassVar[tuple[str, ...]] = ()

    @property
    def finished(self) -> bool:
        return self.status in self.finished_statuses


class ApprovalRequest(FinishedByStatus, models.Model):
    """A request that runs once another person approved exactly its parameters (`likes_project.approvals`):
    `params` hash to `params_hash`, the approval records who, when and the hash it approved, and the approved
    request runs as the system's ops job `job_id` (its failure in `error`). Newest first. Each table adds its
    `status` (its own choices, and the `finished_statuses` among them), what it requests,
    `approval_permissions(<its codename>, …)` and `approval_checks(<its prefix>)` in a `Meta(ApprovalRequest.Meta)`."""

    params = models.JSONField()
    params_hash = models.CharField(max_length=64)
    reason = models.CharField(max_length=512)
    requested_by = models.CharField(max_length=150)
    approved_by = models.CharField(max_length=150, blank=True, default="")
    approved_hash = models.CharField(max_length=64, blank=True, default="")
    approved_at = models.DateTimeField(null=True, blank=True)
    job_id = models.BigIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-id"]
