"""manage.py bucket_migration_plan --to PARTITION --buckets RANGES --reason TEXT --actor USER [--json]

Plans moving virtual buckets of the active bucket space onto a count partition (issue 13 §6). Prints
{"migrationId", "status": "AWAITING_APPROVAL", "buckets", "rowsToCopy"}; another operator approves it with
bucket_migration_approve. Exit 1 when refused (overlap, unknown partition, buckets already there, ...)."""

from __future__ import annotations

from counting.services.migration import ledger
from likes_project.ledgers.cli import LedgerPlanCommand


class Command(LedgerPlanCommand):
    help = ("Plan a virtual-bucket migration onto a count partition (scale-out or scale-in). It waits for another "
            "operator's approval (bucket_migration_approve).")
    ledger = ledger.LEDGER

    def add_plan_arguments(self, parser):
        parser.add_argument("--to", required=True, metavar="PARTITION", help="The target count partition (cnt_02).")
        parser.add_argument("--buckets", required=True, metavar="RANGES", help="Buckets to move: 0-255 or 0-9,100-109.")

    def plan(self, options, actor):
        return ledger.migration_plan(target=options["to"], buckets=options["buckets"], reason=options["reason"],
                                     actor=actor)

    def plan_result(self, m):
        return {"buckets": len(m.buckets), "bucketRange": ledger.buckets_label(m.buckets),
                "rowsToCopy": m.rows_to_copy, "target": m.target_partition}
