"""Create any missing database, migrate every alias, and create the frozen contracts. Idempotent."""

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from likes_project.dbcreate import database_create, database_exists
from opsconsole.services import contracts_ensure


class Command(BaseCommand):
    help = "Create missing databases, migrate every alias (default, relation shards, count partitions)."

    def add_arguments(self, parser):
        parser.add_argument("--no-create", action="store_true", help="Do not create missing databases.")

    def handle(self, *args, **options):
        aliases = list(connections)
        total = len(aliases)
        for i, alias in enumerate(aliases, start=1):
            cfg = connections[alias].settings_dict
            self.stdout.write(f"[{i}/{total}] {alias} ({cfg['NAME']})")
            try:
                exists = database_exists(cfg)
            except Exception as exc:
                raise CommandError(f"cannot reach the database server for {alias}: {exc}") from exc
            if not exists:
                if options["no_create"]:
                    raise CommandError(f"database {cfg['NAME']} for {alias} does not exist")
                try:
                    database_create(cfg)
                except Exception as exc:
                    raise CommandError(
                        f"database {cfg['NAME']} for {alias} is missing and could not be created: {exc}"
                    ) from exc
                self.stdout.write(f"  created database {cfg['NAME']}")
            call_command("migrate", database=alias, interactive=False, verbosity=0)
            self.stdout.write(f"  migrated {alias}")
        contracts_ensure(say=self.stdout.write)
        self.stdout.write(self.style.SUCCESS("all aliases migrated"))
