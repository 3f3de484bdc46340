"""The approved, job-run ledger kit: what the virtual-bucket migration (`counting.BucketMigration`) and the
relation slot move (`relations.RelationSlotMove`) share, so each holds only what it moves.

- `model`: the states, the one table of allowed transitions, and the abstract model with the fields every such
  ledger has (who asked and why, who approved, the job, the copy's progress, the measured pause, the timeline).
- `service`: `ApprovedLedger`, the lifecycle on top of it: get, the audited compare-and-set transition, approve
  (never by the requester), resume, abort, wait, the report.
- `cli`: the approve, resume and abort commands; `console`: the admin's Approve, Resume and Abort steps.

Nothing is imported here, so a models module can import `likes_project.ledgers.model` while apps load.
"""
