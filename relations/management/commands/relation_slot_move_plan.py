"""manage.py relation_slot_move_plan --slots RANGES --to SHARD --reason TEXT --actor USER [--json]

Plans moving logical relation slots (all on one shard under the active contract) onto another relation shard
(issue 16 §3). Prints {"moveId", "status": "AWAITING_APPROVAL", "slots", "slotRange", "source", "target",
"rowsToCopy"}; another operator approves it with relation_slot_move_approve. Exit 1 when refused (overlap,
unknown shard, slots already there or on several shards, ...)."""

from __future__ import annotations

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from likes_project.ranges import ranges_label
from relations.services.slot_moves import ledger


class Command(DomainCommand):
    help = ("Plan a relation slot move onto another relation shard (scale-out). It waits for another operator's "
            "approval (relation_slot_move_approve).")

    def add_arguments(self, parser):
        parser.add_argument("--slots", required=True, metavar="RANGES", help="Logical slots to move: 128-191.")
        parser.add_argument("--to", required=True, metavar="SHARD", help="The target relation shard (rel_02).")
        parser.add_argument("--reason", required=True, help="Why (recorded in the ledger and the audit log).")
        parser.add_argument("--actor", required=True, help="The requesting operator's username.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options["actor"], permission=ledger.PLAN_PERMISSION)
            m = ledger.move_plan(slots=options["slots"], target=options["to"], reason=options["reason"], actor=actor)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        label = ranges_label(m.slots)
        emit(self, options, {"moveId": m.pk, "status": m.state, "slots": len(m.slots), "slotRange": label,
                             "source": m.source_alias, "target": m.target_alias, "rowsToCopy": m.rows_to_copy},
             f"slot move {m.pk}: {m.state}; slots {label} ({len(m.slots)}) {m.source_alias} -> {m.target_alias}, "
             f"{m.rows_to_copy} rows to copy")
