"""Two-person approval, once (issue 29 §2): a request with parameters, their hash, an approval by another person,
and the execution as the system. Repairs (`reconciliation.services.repair`), risk decisions
(`counting.risk.services`) and both approved ledgers (`likes_project.ledgers`) approve through it.

- `params_hash`: the canonical JSON of a request's parameters, hashed; the approval records the hash it approved
  and the database refuses any other (each table's check constraint), so parameters edited after the request
  cannot ride on the approval.
- `Approval.refuse_self`: the requester never approves their own request: refused here (audited, outcome
  "refused") and again by the database (each table's check that the approver is not the requester), whose
  IntegrityError `Approval.record` turns into the same `SelfApproval`.
- `Approval.job_start`: an approved request runs as the system's ops job, never in the approver's request.

One error class per refusal: `SelfApproval` (403 `self_approval`) and `ApprovalVoid` (409 `approval_void`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.errors import Conflict, Forbidden
from likes_project.opsjobs.services import job_start


class SelfApproval(Forbidden):
    code = "self_approval"
    default_message = "The requester cannot approve their own request; another operator must."


class ApprovalVoid(Conflict):
    code = "approval_void"
    default_message = "The parameters changed after the request; request it again."


def params_hash(params: dict) -> str:
    """The hash an approval is bound to: canonical JSON of the parameters."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Approval:
    """One kind of approved request. `noun` names it in messages ("repair"), `target_type` in the audit log
    ("risk_decision", whose approval is audited as `action`, "risk.approve"); the approved request runs as the
    ops job `job_kind`, as the system actor `executor`, with the request's id in `id_param`."""

    noun: str
    target_type: str
    action: str
    job_kind: str
    executor: str
    id_param: str
    job_target: str

    def self_approval(self) -> SelfApproval:
        return SelfApproval(f"The requester of a {self.noun} cannot approve it; another operator must.")

    def refuse_self(self, row, actor: Actor) -> SelfApproval | None:
        """The refusal when `actor` requested `row`, audited in the caller's transaction (or one of its own)."""
        if actor.name != row.requested_by:
            return None
        with transaction.atomic(using="default"):
            audit_record(actor=actor, action=self.action, target_type=self.target_type, target_id=str(row.pk),
                         outcome="refused", params={"reason": "self_approval"})
        return self.self_approval()

    @staticmethod
    def hash_holds(row) -> bool:
        """The request's parameters still hash to what was requested."""
        return params_hash(row.params) == row.params_hash

    def record(self, row, actor: Actor, approve: Callable[[], object], audit_params: dict) -> SelfApproval | None:
        """`approve()` (the row's approving UPDATE) in a savepoint of the caller's transaction, then the audit
        record; the database's refusal of the requester (its check constraint) is the same `SelfApproval`."""
        try:
            with transaction.atomic(using="default"):
                approve()
        except IntegrityError:
            return self.self_approval()
        audit_record(actor=actor, action=self.action, target_type=self.target_type, target_id=str(row.pk),
                     params=audit_params)
        return None

    def job_start(self, row):
        """The system's job that executes the approved request; its id is kept on the row (`job_id`)."""
        job = job_start(kind=self.job_kind, actor=system_actor(self.executor), params={self.id_param: row.pk},
                        target=f"{self.job_target} {row.pk}")
        type(row).objects.filter(pk=row.pk).update(job_id=job.pk)
        return job
