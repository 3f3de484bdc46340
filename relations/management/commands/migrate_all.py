"""Create any missing database, migrate every alias, and create the frozen contracts. Idempotent."""

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from counting.services.bootstrap import count_projection_bootstrap
from counting.services.count_cache import count_cache_generation_bootstrap
from likes_project.dbcreate import database_create, database_exists
from likes_project.eventlog.services import stream_contract_ensure
from relations.services.contracts import relation_shard_contract_ensure
from relations.services.relation_cache import cache_generation_bootstrap
from relations.services.reverse_index import reverse_index_bootstrap


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
        ensured = relation_shard_contract_ensure()
        self.stdout.write(
            f"relation shard contract v{ensured.version} {'created' if ensured.created else 'present'}"
        )
        stream = stream_contract_ensure()
        self.stdout.write(f"stream contract v{stream.version}: {stream.partitions} partitions")
        boot = count_projection_bootstrap()
        self.stdout.write(
            f"count projection generation {boot.generation} (bucket space v{boot.bucket_space_version}, "
            f"manifest {boot.manifest_id}) {'created' if boot.created else 'present'}"
        )
        count_cache = count_cache_generation_bootstrap()
        if count_cache is not None:
            self.stdout.write(f"count cache generation {count_cache.generation} ({count_cache.status})")
        cache_gen = cache_generation_bootstrap()
        self.stdout.write(f"relation cache generation {cache_gen.generation} ({cache_gen.status})")
        self.stdout.write(f"reverse index generation {(rev := reverse_index_bootstrap()).generation} ({rev.status})")
        self.stdout.write(self.style.SUCCESS("all aliases migrated"))
