"""manage.py repair_show REPAIR_ID [--json]: the whole repair record (REPAIR-6)."""

from __future__ import annotations

import json

from likes_project.cli import ShowCommand
from reconciliation.services import repair


class Command(ShowCommand):
    help = ("Show a repair: who requested and approved it, why, its parameters, both watermark sets, each video's "
            "before and after, the result and its job.")
    id_dest, id_metavar, id_type = "repair_id", "REPAIR_ID", int

    def report(self, key):
        return repair.repair_report(repair.repair_get(key))

    def text(self, report):
        return "\n".join(f"{k}: {json.dumps(v, sort_keys=True, default=str)}" for k, v in report.items())
