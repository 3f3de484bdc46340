"""Discard dead letters: give their events up for good, with a reason (issue 9 §2). Audited; the rows
stay, DISCARDED, with who discarded them and why."""

from django.core.management.base import CommandError

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand
from likes_project.eventlog.management.commands.requeue_dead_letters import id_list
from likes_project.eventlog.redrive import DISCARD_PERMISSION, dead_letters_discard


class Command(DomainCommand):
    help = "Discard the given dead letters (NEW or REQUEUED) with a reason; prints how many were discarded."

    def add_arguments(self, parser):
        parser.add_argument("--ids", type=id_list, required=True, help="Comma-separated dead letter ids.")
        parser.add_argument("--reason", required=True, help="Why these events are given up (audited).")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        if not options["ids"]:
            raise CommandError("--ids names no dead letter.")
        actor = cli_actor_resolve(username=options.get("actor"), permission=DISCARD_PERMISSION)
        n = dead_letters_discard(ids=options["ids"], actor=actor, reason=options["reason"])
        self.stdout.write(f"discarded {n} of {len(set(options['ids']))} dead letters")
