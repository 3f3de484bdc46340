"""Delete the no-op command rows (LIKE_COMMAND with changed = false) past the retention window, once, with
progress (CMD-15). The beat job `relations.command_retention` does the same in bounded runs."""

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand
from relations.services.retention import (
    MAX_BATCH,
    RETENTION_PERMISSION,
    command_retention_cutoff,
    command_retention_due,
    command_retention_params,
    command_retention_run,
)


class Command(DomainCommand):
    help = ("Delete command rows that changed nothing (a repeated like, an unlike of a video never liked) older "
            "than the retention window, in batches on every relation shard; rows that changed a relation, and "
            "the relations with their UNLIKED tombstones, are kept. Audited.")

    def add_arguments(self, parser):
        parser.add_argument("--retention-hours", type=int, default=None,
                            help="Keep rows younger than this (default RELATION_COMMAND_RETENTION_HOURS); it must "
                                 "exceed the longest client retry window.")
        parser.add_argument("--batch", type=int, default=None,
                            help=f"Rows per transaction, 1 to {MAX_BATCH} (default RELATION_COMMAND_RETENTION_BATCH).")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        from tqdm import tqdm

        actor = cli_actor_resolve(username=options.get("actor"), permission=RETENTION_PERMISSION)
        hours, size = command_retention_params(retention_hours=options["retention_hours"], batch=options["batch"])
        due = command_retention_due(cutoff=command_retention_cutoff(retention_hours=hours))
        bar = tqdm(total=sum(due.values()), unit=" rows", file=self.stderr, disable=None, dynamic_ncols=True,
                   leave=False)
        done: dict[str, int] = {}

        def progress(alias: str, deleted: int) -> None:
            done[alias] = done.get(alias, 0) + deleted
            bar.set_postfix_str(alias, refresh=False)
            bar.update(deleted)
            if deleted < size:  # the shard is finished
                line = f"{alias}: {done[alias]} no-op command rows deleted"
                self.stderr.write(line) if bar.disable else bar.write(line, file=self.stderr)

        try:
            report = command_retention_run(actor=actor, retention_hours=hours, batch=size, progress=progress)
        finally:
            bar.close()
        shards = ", ".join(f"{alias} {n}" for alias, n in report.deleted.items())
        self.stdout.write(f"Deleted {report.total} no-op command rows created before {report.cutoff:%Y-%m-%d %H:%M:%S} "
                          f"UTC ({hours} h window; {shards}).")
