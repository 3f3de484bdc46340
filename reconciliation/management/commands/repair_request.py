"""manage.py repair_request (--video ID... | --diff ID... | --source snapshot:<id>) --source (facts | snapshot:<id>)
--reason TEXT --actor USER [--json]

Requests a repair from the facts (issue 11 §4) or a restore of the whole projection from a sealed
recovery snapshot (issue 12 §4); it waits for another operator's approval."""

from __future__ import annotations

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand
from likes_project.errors import DomainError
from reconciliation.management.output import add_json_argument, emit, refuse
from reconciliation.services import repair


class Command(DomainCommand):
    help = ("Request a repair of some videos' counts from the relation facts (by video, or by the diffs a check "
            "found), or of the whole count projection from a sealed recovery snapshot (--source snapshot:ID). It "
            "runs once a different operator approves it (repair_approve).")

    def add_arguments(self, parser):
        parser.add_argument("--video", action="append", default=[], metavar="ID",
                            help="A video to repair (repeatable).")
        parser.add_argument("--diff", action="append", default=[], type=int, metavar="ID",
                            help="A diff a check found (repeatable); its video is repaired.")
        parser.add_argument("--source", required=True, metavar="(facts | snapshot:ID)",
                            help="facts: rebuild the videos from the relation facts; snapshot:ID: restore the whole "
                                 "projection from that sealed snapshot and replay the event log from its offsets.")
        parser.add_argument("--reason", required=True)
        parser.add_argument("--actor", required=True, help="The requesting operator's username.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            whole = options["source"].strip() != "facts"  # a snapshot (or a bad source the service names)
            if not options["video"] and not options["diff"] and not whole:
                from likes_project.errors import InvalidInput

                raise InvalidInput("Name what to repair: --video ID or --diff ID.", code="invalid_scope")
            actor = cli_actor_resolve(username=options["actor"], permission=repair.REQUEST_PERMISSION)
            req = repair.repair_request(actor=actor, source=options["source"], reason=options["reason"],
                                        videos=options["video"], diff_ids=options["diff"])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        what = f"{len(req.video_ids)} videos" if req.video_ids else "the whole projection"
        emit(self, options, {"repairId": req.pk, "status": req.status},
             f"repair {req.pk} from {req.params['source']} requested for {what}: {req.status} (another operator "
             f"approves it with: manage.py repair_approve {req.pk} --actor USER)")
