"""Requeue DEAD outbox rows (issue 9 §2): back to RETRY, due now, so the publisher sends them again.
Always safe: consumers absorb a duplicate by version. Audited, in chunks, with progress."""

from django.conf import settings
from django.core.management.base import CommandError

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand
from likes_project.eventlog.management.commands.requeue_dead_letters import id_list
from relations.models import OutboxEvent, OutboxStatus
from relations.services.outbox import OUTBOX_REQUEUE_PERMISSION, outbox_dead_requeue

CHUNK = 1000


class Command(DomainCommand):
    help = ("Requeue DEAD outbox rows of one shard (the ids given, or all of them) for publishing; prints how "
            "many were requeued.")

    def add_arguments(self, parser):
        parser.add_argument("--shard", required=True, choices=list(settings.RELATION_SHARD_ALIASES),
                            help="The relation shard whose outbox holds the rows.")
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--ids", type=id_list, help="Comma-separated outbox row ids.")
        which.add_argument("--all", action="store_true", help="Every DEAD row of the shard.")
        parser.add_argument("--reason", default="", help="Why (recorded in the audit log).")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        from tqdm import tqdm

        if options["ids"] is not None and not options["ids"]:
            raise CommandError("--ids names no outbox row.")
        actor = cli_actor_resolve(username=options.get("actor"), permission=OUTBOX_REQUEUE_PERMISSION)
        alias = options["shard"]
        total = OutboxEvent.objects.using(alias).filter(status=OutboxStatus.DEAD).count()
        requeued = 0
        with tqdm(total=total, unit=" rows", file=self.stderr, disable=None, leave=False) as bar:
            while True:
                ids = None if options["all"] else options["ids"]
                picked = outbox_dead_requeue(alias=alias, actor=actor, ids=ids, limit=CHUNK, reason=options["reason"])
                requeued += len(picked)
                bar.update(len(picked))
                if ids is not None or len(picked) < CHUNK:
                    break
        self.stdout.write(f"requeued {requeued} DEAD outbox rows on {alias}")
