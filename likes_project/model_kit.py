"""Model pieces several apps' models share. Importable from any models module: Django only, no services.

- `requester_not_approver` / `approval_checks`: the database's half of two-person approval
  (`likes_project.approvals`): the approver is never the requester, and an approval binds the hash of the
  parameters it approved. One check per table, named after the table's prefix, so the constraint names
  (and the schema) stay what each table had.
"""

from __future__ import annotations

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
