"""manage.py trace (--operation ID [--user U] | --event ID | --user U --video V) [--json]

The trace of one like through the pipeline (OPS-1, OPS-2, OBS-1): the relation, its commands, the
traced event's outbox row and, per consumer, its checkpoint against the entry, its receipt (or the
evidence it keeps instead) and any dead letter. Read-only, like the console's trace page (not audited).
Bad, missing or ambiguous selectors: a stable code and exit 1. Nothing found: an empty trace, exit 0."""

from __future__ import annotations

from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from opsconsole import trace


class Command(DomainCommand):
    help = ("Trace a like by operation id, event id, or user and video: the relation, its commands, the outbox "
            "row and each consumer's checkpoint, receipt and dead letter.")

    def add_arguments(self, parser):
        parser.add_argument("--operation", metavar="ID", help="An operation id (Idempotency-Key); add --user when "
                                                              "several users used it.")
        parser.add_argument("--event", metavar="ID", help="An event id (the outbox row's UUID).")
        parser.add_argument("--user", metavar="U", help="A username or numeric user id (with --video, or to "
                                                        "narrow --operation).")
        parser.add_argument("--video", metavar="V", help="A video id (with --user).")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            found = trace.trace_find(operation=options["operation"], event=options["event"], user=options["user"],
                                     video=options["video"])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, trace.trace_as_dict(found), trace.trace_text(found))
