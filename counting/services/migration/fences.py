"""The route fences of a virtual-bucket migration on the count partitions (MIG-2, ROUTE-5): the target's fences
of the buckets, the sources' fences at their epoch, and the undo before the CAS. The protocol's steps
(`protocol`) and the ledger's abort (`ledger`) both use them."""

from __future__ import annotations

from collections import defaultdict

from django.db import connections, transaction

from counting.models import BucketMigration, CountProjectionGeneration, CountRouteFence, FenceState
from counting.services.migration import changelog
from likes_project.errors import Conflict


def by_source(m: BucketMigration) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for vb in m.buckets:
        out[m.source_partitions[str(vb)]].append(vb)
    return dict(out)


# Called after every ledger save with the migration (the job renews its lease and shows progress there).
def target_fences_set(alias: str, m: BucketMigration, *, state: str, epoch_offset: int, only_missing: bool) -> None:
    """The target's fence rows of the buckets at E + `epoch_offset` in `state` (RETIRED while it is being
    filled: nothing is routed there yet; ACTIVE at the cutover)."""
    t = CountRouteFence._meta.db_table
    rows = [(m.bucket_space_version, vb, m.source_epochs[str(vb)] + epoch_offset, state) for vb in m.buckets]
    conflict = ("DO NOTHING" if only_missing else
                "DO UPDATE SET route_epoch = EXCLUDED.route_epoch, state = EXCLUDED.state")
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.executemany(f"INSERT INTO {t} (bucket_space_version, virtual_bucket, route_epoch, state) VALUES "
                           f"(%s, %s, %s, %s) ON CONFLICT (bucket_space_version, virtual_bucket) {conflict}", rows)


def source_fences_set(m: BucketMigration, state: str, *, only_from: str | None = None) -> None:
    """The source fences of the buckets (at their epoch E) to `state`, per source partition."""
    t = CountRouteFence._meta.db_table
    extra = " AND state = %s" if only_from else ""
    for alias, vbs in by_source(m).items():
        with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
            cursor.executemany(f"UPDATE {t} SET state = %s WHERE bucket_space_version = %s AND virtual_bucket = %s "
                               f"AND route_epoch = %s{extra}",
                               [(state, m.bucket_space_version, vb, m.source_epochs[str(vb)],
                                 *([only_from] if only_from else [])) for vb in vbs])


def source_fences_reopen(m: BucketMigration) -> None:
    """DRAINING source fences back to ACTIVE (before the CAS only: the source is still the authority)."""
    source_fences_set(m, FenceState.ACTIVE, only_from=FenceState.DRAINING)


def source_fences_retire(m: BucketMigration) -> None:
    """After the CAS: the source never accepts these buckets at E again."""
    source_fences_set(m, FenceState.RETIRED)


def undo_before_cas(m: BucketMigration) -> None:
    """Before the CAS the source is still the authority: lift its fences back to ACTIVE, and remove the
    target's copy and fences of the buckets (an abort, or a contract found broken). Idempotent."""
    gen = CountProjectionGeneration.objects.get(generation=m.generation)
    if m.target_manifest_id and gen.active_manifest_id == m.target_manifest_id:
        raise Conflict(f"migration {m.pk} is past its CAS; it cannot be undone", code="migration_past_cutover")
    source_fences_reopen(m)
    target_fences_set(m.target_partition, m, state=FenceState.RETIRED, epoch_offset=1, only_missing=False)
    changelog.rows_delete(m.target_partition, generation=m.generation, buckets=m.buckets)
