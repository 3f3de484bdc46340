"""Creates the first bucket space, projection generation and sealed route manifest (issue 3 §3)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connections, transaction

from counting import routing
from counting.models import CountBucketSpace, CountProjectionGeneration, CountRouteFence, ProjectionGenerationStatus
from counting.services.manifests import manifest_seal, routes_materialize

BUCKET_SPACE_V1_SEED = "likes-count-bucket-v1"


@dataclass(frozen=True)
class BootstrapResult:
    bucket_space_version: int
    generation: int
    manifest_id: int
    created: bool


def bootstrap_partitions() -> list[str]:
    """COUNT_BOOTSTRAP_PARTITIONS, checked: configured partitions, in configuration order."""
    wanted = list(dict.fromkeys(settings.COUNT_BOOTSTRAP_PARTITIONS))
    unknown = sorted(set(wanted) - set(settings.COUNT_PARTITION_ALIASES))
    if unknown or not wanted:
        raise ImproperlyConfigured(f"COUNT_BOOTSTRAP_PARTITIONS names {unknown or 'no'} count partitions; "
                                   f"configured: {', '.join(settings.COUNT_PARTITION_ALIASES)}")
    return [a for a in settings.COUNT_PARTITION_ALIASES if a in wanted]


def count_projection_bootstrap(*, virtual_buckets: int | None = None) -> BootstrapResult:
    """Create bucket space v1, generation 1 and its sealed epoch-1 manifest (buckets spread
    round-robin over COUNT_BOOTSTRAP_PARTITIONS), materialise the routes and the partition fences.

    Transaction: one durable transaction on `default` for the control plane, then one per count
    partition for its fences. Idempotency: an existing active generation is kept as it is; its
    fences are (re)created if missing.
    """
    active = CountProjectionGeneration.objects.filter(status=ProjectionGenerationStatus.ACTIVE).first()
    created = False
    if active is None:
        v = virtual_buckets or settings.COUNT_VIRTUAL_BUCKETS
        aliases = bootstrap_partitions()
        try:
            with transaction.atomic(using="default", durable=True):
                CountBucketSpace.objects.create(
                    version=1, hash_algorithm=routing.HASH_SHA256_BE64, hash_seed=BUCKET_SPACE_V1_SEED,
                    key_encoding=routing.ENCODING_LP_UTF8_V1, virtual_buckets=v,
                )
                items = [(vb, aliases[vb % len(aliases)], 1) for vb in range(v)]
                manifest = manifest_seal(bucket_space_version=1, virtual_buckets=v, items=items)
                CountProjectionGeneration.objects.create(
                    generation=1, bucket_space_version=1, active_manifest_id=manifest.pk,
                    status=ProjectionGenerationStatus.ACTIVE,
                )
                routes_materialize(bucket_space_version=1, items=items)
            created = True
        except IntegrityError:
            pass  # a concurrent bootstrap won; use what it created
        active = CountProjectionGeneration.objects.get(status=ProjectionGenerationStatus.ACTIVE)
    routing.reset_cache()
    gen = routing.active()
    for alias in settings.COUNT_PARTITION_ALIASES:
        fences_ensure(alias=alias, gen=gen)
    return BootstrapResult(gen.space.version, gen.generation, gen.manifest_id, created)


def fences_ensure(*, alias: str, gen: routing.GenerationRoutes) -> int:
    """Create the partition-local fence rows for the buckets the active manifest routes here."""
    table = CountRouteFence._meta.db_table
    rows = [(gen.space.version, vb, gen.routes[vb].epoch) for vb in gen.buckets_on(alias)]
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} (bucket_space_version, virtual_bucket, route_epoch, state) "
            "VALUES (%s, %s, %s, 'ACTIVE') ON CONFLICT (bucket_space_version, virtual_bucket) DO NOTHING",
            rows,
        )
    return len(rows)
