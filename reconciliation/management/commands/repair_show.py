"""manage.py repair_show REPAIR_ID [--json]: the whole repair record (REPAIR-6)."""

from __future__ import annotations

import json

from likes_project.cli import DomainCommand
from likes_project.errors import DomainError
from reconciliation.management.output import add_json_argument, emit, refuse
from reconciliation.services import repair


class Command(DomainCommand):
    help = ("Show a repair: who requested and approved it, why, its parameters, both watermark sets, each video's "
            "before and after, the result and its job.")

    def add_arguments(self, parser):
        parser.add_argument("repair_id", type=int, metavar="REPAIR_ID")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            report = repair.repair_report(repair.repair_get(options["repair_id"]))
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        text = "\n".join(f"{k}: {json.dumps(v, sort_keys=True, default=str)}" for k, v in report.items())
        emit(self, options, report, text)
