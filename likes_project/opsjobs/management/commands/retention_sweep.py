"""manage.py retention_sweep [--rule NAME]... [--status] [--json] [--actor USER]

Delete what each retention rule (issue 31 §4, PRIV-3; `likes_project.retention`) keeps past its window, rule by
rule in batches, to the end, with a progress line per batch on stderr; each rule's sweep is audited
(`retention.sweep`). `--status` deletes nothing: each rule's window and the oldest thing it keeps, measured now.
Exit 0 done, 1 refused (an unknown rule, an actor without the permission) or a rule busy or failed."""

from __future__ import annotations

from django.core.management.base import CommandError

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from likes_project.retention import RETENTION_RUN_PERMISSION, retention_status, retention_sweep


class Command(DomainCommand):
    help = ("Delete what every retention rule (or --rule NAME, repeatable) keeps past its window, in batches, with "
            "progress; each rule's sweep is audited. --status shows each rule's window and oldest kept thing and "
            "deletes nothing. The beat job `retention.sweep` does the same hourly, bounded.")

    def add_arguments(self, parser):
        parser.add_argument("--rule", action="append", dest="rules", metavar="NAME",
                            help="Only this rule (repeatable); default every rule.")
        parser.add_argument("--status", action="store_true",
                            help="Show each rule's setting, window and the oldest thing it keeps (measured now); "
                                 "delete nothing.")
        add_json_argument(parser)
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        try:
            if options["status"]:
                return self._status(options)
            actor = cli_actor_resolve(username=options.get("actor"), permission=RETENTION_RUN_PERMISSION)
            report = retention_sweep(actor=actor, rules=options["rules"], progress=self._progress)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        lines = [f"{r.rule}: deleted {r.deleted} past {r.window} ({r.status}"
                 + (f": {r.error}" if r.error else "") + ")" for r in report.rules]
        emit(self, options, report.as_dict(), "\n".join(lines) + f"\nDeleted {report.deleted} in all.")
        stopped = [r.rule for r in report.rules if r.status != "ok"]
        if stopped:
            raise CommandError(f"not swept (busy or failed): {', '.join(stopped)}")

    def _progress(self, rule: str, deleted: int, so_far: int) -> None:
        self.stderr.write(f"{rule}: {so_far} deleted so far")

    def _status(self, options: dict) -> None:
        rows = retention_status(rules=options["rules"], live=True)
        text = "\n".join(f"{s.rule}: keeps {s.window} ({s.setting}); oldest kept {s.age_text}"
                         + (" - due" if s.due else "") + f"; deletes {s.what}" for s in rows)
        emit(self, options, {"rules": [s.as_dict() for s in rows]}, text or "No retention rule is registered.")
