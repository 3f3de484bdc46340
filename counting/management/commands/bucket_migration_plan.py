"""manage.py bucket_migration_plan --to PARTITION --buckets RANGES --reason TEXT --actor USER [--json]

Plans moving virtual buckets of the active bucket space onto a count partition (issue 13 §6). Prints
{"migrationId", "status": "AWAITING_APPROVAL", "buckets", "rowsToCopy"}; another operator approves it with
bucket_migration_approve. Exit 1 when refused (overlap, unknown partition, buckets already there, ...)."""

from __future__ import annotations

from counting.services.migration import ledger
from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError


class Command(DomainCommand):
    help = ("Plan a virtual-bucket migration onto a count partition (scale-out or scale-in). It waits for another "
            "operator's approval (bucket_migration_approve).")

    def add_arguments(self, parser):
        parser.add_argument("--to", required=True, metavar="PARTITION", help="The target count partition (cnt_02).")
        parser.add_argument("--buckets", required=True, metavar="RANGES", help="Buckets to move: 0-255 or 0-9,100-109.")
        parser.add_argument("--reason", required=True, help="Why (recorded in the ledger and the audit log).")
        parser.add_argument("--actor", required=True, help="The requesting operator's username.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options["actor"], permission=ledger.PLAN_PERMISSION)
            m = ledger.migration_plan(target=options["to"], buckets=options["buckets"], reason=options["reason"],
                                      actor=actor)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        label = ledger.buckets_label(m.buckets)
        emit(self, options, {"migrationId": m.pk, "status": m.state, "buckets": len(m.buckets), "bucketRange": label,
                             "rowsToCopy": m.rows_to_copy, "target": m.target_partition},
             f"migration {m.pk}: {m.state}; buckets {label} ({len(m.buckets)}) -> {m.target_partition}, "
             f"{m.rows_to_copy} rows to copy")
