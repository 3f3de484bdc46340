"""`manage.py drill_records`: the kept records of fault drill runs (spec TEST-5, issue 33 §2), newest first."""

from likes_project.cli import DomainCommand, add_json_argument, emit
from likes_project.errors import InvalidInput
from opsconsole.drills.records import record_as_dict
from opsconsole.models import DrillRecord, DrillVerdict


class Command(DomainCommand):
    help = ("List the records fault drills left (every run of `manage.py drill` and of the soak, passed or not): "
            "drill, spec §7 numbers, stage, topology, code version, times, verdict and open issues. --json prints "
            "{\"records\": [...]} with each record's full verdict.")

    def add_arguments(self, parser):
        parser.add_argument("--drill", help="Only this drill's records.")
        parser.add_argument("--verdict", choices=DrillVerdict.values, help="Only records with this verdict.")
        parser.add_argument("--limit", type=int, default=20, help="At most this many records (default 20).")
        add_json_argument(parser)

    def run(self, *args, **options):
        if not 1 <= options["limit"] <= 1000:
            raise InvalidInput("--limit must be between 1 and 1000.", code="invalid_limit")
        rows = DrillRecord.objects.all()
        if options["drill"]:
            rows = rows.filter(drill=options["drill"])
        if options["verdict"]:
            rows = rows.filter(verdict=options["verdict"])
        records = [record_as_dict(r) for r in rows[:options["limit"]]]
        text = "\n".join(
            f"{r['id']:>5}  {r['startedAt'][:19]}  {r['verdict']:<5}  {r['drill']}"
            f"{' (§7 ' + ','.join(map(str, r['specNumbers'])) + ')' if r['specNumbers'] else ''}  {r['stage']}, "
            f"{r['topology']}, {r['codeVersion']}" + "".join(f"\n         open: {i}" for i in r["openIssues"])
            for r in records) or "no drill records"
        emit(self, options, {"records": records}, text)
