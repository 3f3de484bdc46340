"""The approved, job-run ledger's states, its table of allowed transitions, and the fields every such ledger has.

  plan (operator) -> AWAITING_APPROVAL -> approve (another operator; the database refuses the requester)
  -> PREPARE -> COPYING -> CATCHING_UP -> CUTOVER -> VERIFY -> RETIRED
  ABORTED: by an operator, from any state before the switch (never after: moving back is another move)
  FAILED: the protocol found its frozen plan broken

Abstract: each ledger adds what it moves, its own constraints (the check that refuses the requester as approver
is named per table: `likes_project.model_kit.requester_not_approver`) and its permissions.
"""

from __future__ import annotations

from django.db import models


class LedgerState(models.TextChoices):
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    PREPARE = "PREPARE"
    COPYING = "COPYING"
    CATCHING_UP = "CATCHING_UP"
    CUTOVER = "CUTOVER"
    VERIFY = "VERIFY"
    RETIRED = "RETIRED"
    ABORTED = "ABORTED"
    FAILED = "FAILED"


S = LedgerState
TERMINAL = frozenset({S.RETIRED, S.ABORTED, S.FAILED})
TRANSITIONS: dict[str, frozenset[str]] = {
    S.AWAITING_APPROVAL: frozenset({S.PREPARE, S.ABORTED}),
    S.PREPARE: frozenset({S.COPYING, S.ABORTED, S.FAILED}),
    S.COPYING: frozenset({S.CATCHING_UP, S.ABORTED, S.FAILED}),
    S.CATCHING_UP: frozenset({S.CUTOVER, S.ABORTED, S.FAILED}),
    S.CUTOVER: frozenset({S.VERIFY, S.ABORTED, S.FAILED}),  # VERIFY only with the switch, in its transaction
    S.VERIFY: frozenset({S.RETIRED}),
    S.RETIRED: frozenset(),
    S.ABORTED: frozenset(),
    S.FAILED: frozenset(),
}
BEFORE_SWITCH = frozenset({S.AWAITING_APPROVAL, S.PREPARE, S.COPYING, S.CATCHING_UP, S.CUTOVER})  # abortable
IN_FLIGHT = frozenset({S.PREPARE, S.COPYING, S.CATCHING_UP, S.CUTOVER})  # approved, before the switch


class ApprovedLedgerModel(models.Model):
    state = models.CharField(max_length=20, choices=LedgerState.choices, default=LedgerState.AWAITING_APPROVAL,
                             db_index=True)
    rows_to_copy = models.BigIntegerField(default=0)  # estimated at the plan
    # Progress, all resumable: the copy's keyset cursor, what the copy and the catch-up did, the write pause the
    # switch measured (fence taken -> switch committed) and what VERIFY found.
    copy_cursor = models.JSONField(default=dict, blank=True)
    copied_rows = models.BigIntegerField(default=0)
    catchup_passes = models.PositiveIntegerField(default=0)
    write_pause_ms = models.FloatField(null=True, blank=True)
    verify_result = models.JSONField(default=dict, blank=True)
    # Who and why: a second operator approves (the database refuses the requester).
    reason = models.TextField()
    requested_by = models.CharField(max_length=150)
    requested_channel = models.CharField(max_length=16, default="cli")
    approved_by = models.CharField(max_length=150, blank=True, default="")
    abort_reason = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    cutover_at = models.DateTimeField(null=True, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    source_cleanup_after = models.DateTimeField(null=True, blank=True)  # the source's copy is kept until then
    source_cleaned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-pk"]

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    @property
    def resumable(self) -> bool:
        """Approved and not finished, or RETIRED with its source copy still kept (the cleanup is left)."""
        return ((self.state not in TERMINAL and self.state != LedgerState.AWAITING_APPROVAL)
                or (self.state == LedgerState.RETIRED and self.source_cleaned_at is None))
