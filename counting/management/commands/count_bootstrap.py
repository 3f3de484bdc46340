"""Create the first bucket space, projection generation and sealed route manifest (idempotent)."""

from django.core.management.base import BaseCommand

from counting.services.bootstrap import count_projection_bootstrap
from likes_project.eventlog.services import stream_contract_ensure


class Command(BaseCommand):
    help = "Create bucket space v1, generation 1, its sealed manifest, routes and partition fences."

    def handle(self, *args, **options):
        stream = stream_contract_ensure()
        self.stdout.write(f"stream contract v{stream.version}: {stream.partitions} partitions")
        result = count_projection_bootstrap()
        self.stdout.write(
            f"generation {result.generation}, bucket space v{result.bucket_space_version}, "
            f"manifest {result.manifest_id}: {'created' if result.created else 'already present'}"
        )
