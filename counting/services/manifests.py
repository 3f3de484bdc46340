"""Route manifests (ROUTE-1 … ROUTE-4): sealing one, checking one, and the materialised routes rebuilt
from one. A manifest covers every virtual bucket of its bucket space exactly once, each on one partition at
one epoch; once SEALED (row count and checksum) it never changes. `COUNT_BUCKET_ROUTE` is only ever written
from a manifest, so it can always be rebuilt from the active one (ROUTE-3); nothing routes by it (routes are
read from the active manifest's items: `counting.routing`, ROUTE-4), it is the operators' materialised view,
which the migrations' beat puts back when it disagrees (`routes_rebuild_if_disagreeing`)."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from counting.models import CountBucketRoute, CountRouteManifest, CountRouteManifestItem, ManifestStatus
from likes_project.audit.services import Actor, audit_record, system_actor

ROUTES_SWEEPER = "route-sweeper"  # the audit actor of a rebuild the beat did


class ManifestInvalid(Exception):
    """A manifest that does not cover every bucket exactly once, or whose count/checksum differ."""


def manifest_checksum(items: list[tuple[int, str, int]]) -> str:
    """sha256 over "vb:partition:epoch\\n" lines in bucket order."""
    h = hashlib.sha256()
    for vb, partition, epoch in sorted(items):
        h.update(f"{vb}:{partition}:{epoch}\n".encode())
    return h.hexdigest()


def manifest_items(manifest_id: int) -> list[tuple[int, str, int]]:
    return list(CountRouteManifestItem.objects.filter(manifest_id=manifest_id).order_by("virtual_bucket")
                .values_list("virtual_bucket", "physical_partition", "route_epoch"))


def manifest_verify(manifest: CountRouteManifest, virtual_buckets: int) -> list[tuple[int, str, int]]:
    """Check a manifest's items cover 0..V-1 exactly once on configured partitions, and match its
    recorded row count and checksum. Returns the items."""
    items = manifest_items(manifest.pk)
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


def manifest_seal(*, bucket_space_version: int, virtual_buckets: int,
                  items: list[tuple[int, str, int]]) -> CountRouteManifest:
    """A CANDIDATE manifest of `items`, verified and SEALED (ROUTE-2). Inside the caller's transaction on
    `default` when there is one (the bootstrap), its own otherwise."""
    with transaction.atomic(using="default"):
        manifest = CountRouteManifest.objects.create(bucket_space_version=bucket_space_version)
        CountRouteManifestItem.objects.bulk_create(
            CountRouteManifestItem(manifest_id=manifest.pk, virtual_bucket=vb, physical_partition=p, route_epoch=e)
            for vb, p, e in sorted(items))
        manifest_verify(manifest, virtual_buckets)  # a candidate must cover every bucket before it is sealed
        manifest.status, manifest.row_count = ManifestStatus.SEALED, len(items)
        manifest.checksum, manifest.sealed_at = manifest_checksum(items), timezone.now()
        manifest.save()
        manifest_verify(manifest, virtual_buckets)
    return manifest


def _routes_current(bucket_space_version: int) -> dict[int, tuple[str, int]]:
    return {vb: (p, e) for vb, p, e in CountBucketRoute.objects.filter(
        bucket_space_version=bucket_space_version).values_list("virtual_bucket", "physical_partition", "route_epoch")}


def _routes_differing(current: dict[int, tuple[str, int]], items: list[tuple[int, str, int]]) -> list[int]:
    """The buckets whose materialised route is not the manifest's: wrong, missing, or not in the manifest."""
    wanted = {vb: (p, e) for vb, p, e in items}
    return sorted(vb for vb in set(current) | set(wanted) if current.get(vb) != wanted.get(vb))


def routes_materialize(*, bucket_space_version: int, items: list[tuple[int, str, int]]) -> int:
    """Make `COUNT_BUCKET_ROUTE` of the bucket space say what `items` (a sealed manifest's) say; in the
    caller's transaction on `default`. One statement for the changed buckets (a migration's cutover runs
    it inside its write pause). Returns how many bucket rows changed (rewritten or deleted)."""
    from django.db import connections

    current = _routes_current(bucket_space_version)
    changed = [(vb, p, e) for vb, p, e in items if current.get(vb) != (p, e)]
    if changed:
        t = CountBucketRoute._meta.db_table
        with connections["default"].cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {t} (bucket_space_version, virtual_bucket, physical_partition, route_epoch) "
                "SELECT %s, vb, p, e FROM unnest(%s::int[], %s::text[], %s::int[]) AS x(vb, p, e) "
                "ON CONFLICT (bucket_space_version, virtual_bucket) DO UPDATE SET physical_partition = "
                "EXCLUDED.physical_partition, route_epoch = EXCLUDED.route_epoch",
                [bucket_space_version, [c[0] for c in changed], [c[1] for c in changed], [c[2] for c in changed]])
    stale = set(current) - {vb for vb, _, _ in items}
    if stale:
        CountBucketRoute.objects.filter(bucket_space_version=bucket_space_version, virtual_bucket__in=stale).delete()
    return len(changed) + len(stale)


def _active_routes(generation: int | None, *, lock: bool):
    """(generation row, bucket space, the verified items of its active manifest)."""
    from counting.models import CountBucketSpace, CountProjectionGeneration

    qs = CountProjectionGeneration.objects.select_for_update() if lock else CountProjectionGeneration.objects
    gen = qs.get(generation=generation) if generation else qs.get(status="ACTIVE")
    space = CountBucketSpace.objects.get(version=gen.bucket_space_version)
    items = manifest_verify(CountRouteManifest.objects.get(pk=gen.active_manifest_id), space.virtual_buckets)
    return gen, space, items


def routes_disagreeing(generation: int | None = None) -> list[int]:
    """ROUTE-3's check (reads only): the buckets whose materialised route disagrees with the active manifest
    of `generation` (the ACTIVE one by default)."""
    _gen, space, items = _active_routes(generation, lock=False)
    return _routes_differing(_routes_current(space.version), items)


def routes_rebuild(generation: int | None = None, *, actor: Actor | None = None) -> int:
    """ROUTE-3 after a crash: the materialised routes rebuilt from the generation's active manifest (the
    arbiter); audited (`routes.rebuild`) when it rewrote anything. Returns how many bucket rows were wrong.

    Transaction: one durable transaction on `default`, the generation's row locked first, so a cutover's CAS
    (which updates that row and the routes in one transaction) is never undone by a rebuild that read the
    pointer before it. Idempotency: routes that agree are not written; a rerun returns 0."""
    with transaction.atomic(using="default", durable=True):
        gen, space, items = _active_routes(generation, lock=True)
        wrong = _routes_differing(_routes_current(space.version), items)
        if not wrong:
            return 0
        changed = routes_materialize(bucket_space_version=space.version, items=items)
        audit_record(actor=actor or system_actor(ROUTES_SWEEPER), action="routes.rebuild",
                     target_type="count_generation", target_id=str(gen.generation),
                     params={"manifestId": gen.active_manifest_id, "bucketSpaceVersion": space.version,
                             "changed": changed, "buckets": wrong[:20]})
    return changed


def routes_rebuild_if_disagreeing() -> int:
    """The beat's ROUTE-3 sweep: when the active generation's materialised routes disagree with its active
    manifest, rebuild them from it (the check reads only; nothing is written when they agree). Returns how
    many bucket rows were rewritten."""
    if not routes_disagreeing():
        return 0
    return routes_rebuild()
