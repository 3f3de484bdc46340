"""Two-person approval, once (issue 29 §2): a request with parameters, their hash, an approval by another person,
and the execution as the system. Repairs (`reconciliation.services.repair`), risk decisions
(`counting.risk.services`) and both approved ledgers (`likes_project.ledgers`) approve through it.

- `params_hash`: the canonical JSON of a request's parameters, hashed; the approval records the hash it approved
  and the database refuses any other (each table's check constraint, `likes_project.model_kit.approval_checks`),
  so parameters edited after the request cannot ride on the approval.
- `Approval.refuse_self`: the requester never approves their own request: refused here (audited, outcome
  "refused") and again by the database (each table's check that the approver is not the requester), whose
  IntegrityError `Approval.record` turns into the same `SelfApproval`.
- `Approval.job_start`: an approved request runs as the system's ops job, never in the approver's request.

One error class per refusal: `SelfApproval` (403 `self_approval`) and `ApprovalVoid` (409 `approval_void`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.errors import Conflict, Forbidden, NotFound
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


AWAITING_APPROVAL = "AWAITING_APPROVAL"


@dataclass(frozen=True)
class Approval:
    """One kind of approved request, rows of `model` (with `status`, `params`, `params_hash`, `requested_by`,
    `job_id`). `noun` names it in messages ("repair"), `label` in "No repair request 3", `code` prefixes its
    refusal codes (`repair_not_found`, `repair_not_awaiting_approval`), `target_type` names it in the audit log
    ("risk_decision", whose approval is audited as `action`, "risk.approve"); the approved request runs as the
    ops job `job_kind`, as the system actor `executor`, with the request's id in `id_param`."""

    model: type
    code: str
    label: str
    noun: str
    target_type: str
    action: str
    job_kind: str
    executor: str
    id_param: str
    job_target: str

    @functools.cached_property
    def not_found(self) -> type[NotFound]:
        return type(f"{self.model.__name__}NotFound", (NotFound,), {
            "code": f"{self.code}_not_found", "default_message": f"No such {self.label}.", "__module__": __name__})

    @functools.cached_property
    def not_awaiting(self) -> type[Conflict]:
        return type(f"{self.model.__name__}NotAwaitingApproval", (Conflict,), {
            "code": f"{self.code}_not_awaiting_approval", "__module__": __name__})

    def get(self, request_id):
        """The request, or `<code>_not_found` (404) for an unknown or malformed id."""
        try:
            return self.model.objects.get(pk=int(request_id))
        except (self.model.DoesNotExist, ValueError, TypeError):
            raise self.not_found(f"No {self.label} {request_id!r}.") from None

    def lock_awaiting(self, request_id, *, step: str = "approved"):
        """Inside the caller's transaction on `default`: the request, row-locked, if it still awaits approval;
        `<code>_not_awaiting_approval` (409) otherwise."""
        row = self.model.objects.select_for_update().filter(pk=self.get(request_id).pk).first()
        if row.status != AWAITING_APPROVAL:
            raise self.not_awaiting(f"{self.noun.capitalize()} {row.pk} is {row.status}; only {AWAITING_APPROVAL} can "
                                    f"be {step}.")
        return row

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
