"""Creates the first bucket space, projection generation and sealed route manifest (issue 3 §3)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from counting import routing
from counting.models import (
    CountBucketRoute,
    CountBucketSpace,
    CountProjectionGeneration,
    CountRouteFence,
    CountRouteManifest,
    CountRouteManifestItem,
    ManifestStatus,
    ProjectionGenerationStatus,
)

BUCKET_SPACE_V1_SEED = "likes-count-bucket-v1"


class ManifestInvalid(Exception):
    """A manifest that does not cover every bucket exactly once, or whose count/checksum differ."""


def manifest_checksum(items: list[tuple[int, str, int]]) -> str:
    """sha256 over "vb:partition:epoch\\n" lines in bucket order."""
    h = hashlib.sha256()
    for vb, partition, epoch in sorted(items):
        h.update(f"{vb}:{partition}:{epoch}\n".encode())
    return h.hexdigest()


def manifest_verify(manifest: CountRouteManifest, virtual_buckets: int) -> list[tuple[int, str, int]]:
    """Check a manifest's items cover 0..V-1 exactly once on configured partitions, and match its
    recorded row count and checksum. Returns the items."""
    items = list(
        CountRouteManifestItem.objects.filter(manifest_id=manifest.pk)
        .order_by("virtual_bucket")
        .values_list("virtual_bucket", "physical_partition", "route_epoch")
    )
    if [vb for vb, _, _ in items] != list(range(virtual_buckets)):
        raise ManifestInvalid(f"manifest {manifest.pk} does not cover every bucket exactly once")
    unknown = {p for _, p, _ in items} - set(settings.COUNT_PARTITION_ALIASES)
    if unknown:
        raise ManifestInvalid(f"manifest {manifest.pk} names unknown partitions {sorted(unknown)}")
    if manifest.status == ManifestStatus.SEALED and (
        manifest.row_count != len(items) or manifest.checksum != manifest_checksum(items)
    ):
        raise ManifestInvalid(f"manifest {manifest.pk} row count or checksum does not match its items")
    return items


@dataclass(frozen=True)
class BootstrapResult:
    bucket_space_version: int
    generation: int
    manifest_id: int
    created: bool


def count_projection_bootstrap(*, virtual_buckets: int | None = None) -> BootstrapResult:
    """Create bucket space v1, generation 1 and its sealed epoch-1 manifest (buckets spread
    round-robin over the count partitions), materialise the routes and the partition fences.

    Transaction: one durable transaction on `default` for the control plane, then one per count
    partition for its fences. Idempotency: an existing active generation is kept as it is; its
    fences are (re)created if missing.
    """
    active = CountProjectionGeneration.objects.filter(status=ProjectionGenerationStatus.ACTIVE).first()
    created = False
    if active is None:
        v = virtual_buckets or settings.COUNT_VIRTUAL_BUCKETS
        aliases = list(settings.COUNT_PARTITION_ALIASES)
        try:
            with transaction.atomic(using="default", durable=True):
                CountBucketSpace.objects.create(
                    version=1, hash_algorithm=routing.HASH_SHA256_BE64, hash_seed=BUCKET_SPACE_V1_SEED,
                    key_encoding=routing.ENCODING_LP_UTF8_V1, virtual_buckets=v,
                )
                items = [(vb, aliases[vb % len(aliases)], 1) for vb in range(v)]
                manifest = CountRouteManifest.objects.create(bucket_space_version=1)
                CountRouteManifestItem.objects.bulk_create(
                    CountRouteManifestItem(manifest_id=manifest.pk, virtual_bucket=vb, physical_partition=p,
                                           route_epoch=e) for vb, p, e in items
                )
                manifest.status, manifest.row_count = ManifestStatus.SEALED, len(items)
                manifest.checksum, manifest.sealed_at = manifest_checksum(items), timezone.now()
                manifest.save()
                manifest_verify(manifest, v)
                CountProjectionGeneration.objects.create(
                    generation=1, bucket_space_version=1, active_manifest_id=manifest.pk,
                    status=ProjectionGenerationStatus.ACTIVE,
                )
                CountBucketRoute.objects.bulk_create(
                    CountBucketRoute(bucket_space_version=1, virtual_bucket=vb, physical_partition=p, route_epoch=e)
                    for vb, p, e in items
                )
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
