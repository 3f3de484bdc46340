"""The migration ledger's lifecycle (MIG-2; issue 13 §2, §6): plan, approve, abort, resume. The lifecycle and
its one table of allowed transitions are the approved-ledger kit's (`likes_project.ledgers`); this module says
what a migration moves and checks.

  plan (operator) -> AWAITING_APPROVAL -> approve (another operator; the database refuses the requester)
  -> PREPARE -> COPYING -> CATCHING_UP -> CUTOVER -> VERIFY -> RETIRED
  ABORTED: by an operator, from any state before the CAS (never after: a reverse migration moves back)
  FAILED: the protocol found the frozen contract broken (the bucket space, generation or a route moved)

Every transition is audited in the transaction that makes it.
"""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone

from counting import routing
from counting.models import BucketMigration, CountProjectionGeneration
from counting.services import route_switch
from counting.services.migration import changelog, fences
from likes_project.approvals import SelfApproval as SelfApproval  # the kit's one class
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import InvalidInput
from likes_project.ledgers.model import BEFORE_SWITCH, IN_FLIGHT
from likes_project.ledgers.model import TRANSITIONS as TRANSITIONS  # the protocol's table, walked by the tests
from likes_project.ledgers.runner import LedgerRunner
from likes_project.ledgers.service import ApprovedLedger
from likes_project.ranges import parse_ranges, ranges_label

MIGRATION_JOB = "counting.bucket_migration"
EXECUTOR = "bucket-migration"
BEFORE_CAS = BEFORE_SWITCH  # the route CAS is a migration's switch


class BucketMigrations(ApprovedLedger):
    model = BucketMigration
    noun, code, target_type, id_param = "migration", "migration", "bucket_migration", "migrationId"
    job_kind, job_target, executor = MIGRATION_JOB, "bucket migration", EXECUTOR
    plan_lock = 0x4C4B4D47  # "LKMG"
    units_name = "buckets"

    def ends(self, m: BucketMigration) -> tuple[str, str]:
        return ", ".join(sorted(set(m.source_partitions.values()))), m.target_partition

    def approval_checks(self, m: BucketMigration) -> None:
        _refuse_generation_change(routing.active())

    def approval_guard(self, m: BucketMigration):
        # Exclusive on the route table for the approval's commit: a running repair (which must never overlap
        # a copy, ROUTE-7) or a snapshot being cut makes the approval wait, then refuse.
        return route_switch.switch_exclusive(f"approve migration {m.pk}", timeout_s=5.0)

    def abort_refusal(self, m: BucketMigration):
        if m.state in BEFORE_CAS:
            return None
        return self.state_conflict(f"migration {m.pk} is {m.state}: past the cutover (or finished), it cannot be "
                                      "aborted; plan a reverse migration to move the buckets back.",
                                      code="migration_past_cutover")

    def undo_before_switch(self, m: BucketMigration) -> None:
        """The source fences are lifted back to ACTIVE, the target's copy and fences of the buckets removed."""
        fences.undo_before_cas(m)

    def after_abort(self) -> None:
        routing.reset_cache()

    def progress_fields(self, m: BucketMigration) -> dict[str, int]:
        return {"replayedEvents": m.replayed_events}

    def report_fields(self, m: BucketMigration) -> dict:
        return {
            "buckets": len(m.buckets), "bucketRange": buckets_label(m.buckets), "bucketList": m.buckets,
            "target": m.target_partition, "sources": sorted(set(m.source_partitions.values())),
            "bucketSpaceVersion": m.bucket_space_version, "generation": m.generation,
            "sourceManifestId": m.source_manifest_id, "targetManifestId": m.target_manifest_id,
            "sourceEpochs": sorted(set(m.source_epochs.values())),
            "targetEpochs": sorted({e + 1 for e in m.source_epochs.values()}),
            "replayedEvents": m.replayed_events, "baseline": m.baseline,
            "replayNextPosition": m.replay_next_position, "finalWatermark": m.final_watermark,
            "cutoverCheckpointRef": m.cutover_checkpoint_ref, "cutoverStreamOffsets": m.cutover_stream_offsets,
        }


LEDGER = BucketMigrations()
RUNNER = LedgerRunner(LEDGER, lock=0x4C4B4D52)  # "LKMR", with the migration id
migration_get = LEDGER.get
transition = LEDGER.transition  # the protocol's steps: a CAS through the table, audited
migration_report = LEDGER.report


def parse_buckets(raw: str, virtual_buckets: int) -> list[int]:
    """"0-255", "3", "0-9,100-109" -> sorted buckets; each inside 0..V-1."""
    return parse_ranges(raw, virtual_buckets, what="buckets", code="invalid_buckets")


def buckets_label(buckets: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    return ranges_label(buckets)


def migration_plan(*, target: str, buckets: str | list[int], reason: str, actor: Actor) -> BucketMigration:
    """AWAITING_APPROVAL: move `buckets` of the active generation's bucket space onto `target`.
    Refused: an unknown target, buckets already there, a bucket another unfinished migration moves, a
    generation being replaced. Transaction: the ledger row and its audit record on `default`."""
    reason = LEDGER.plan_reason(reason, actor)
    if target not in settings.COUNT_PARTITION_ALIASES:
        raise InvalidInput(f"The target {target!r} is not a configured count partition "
                           f"({', '.join(settings.COUNT_PARTITION_ALIASES)}).", code="unknown_partition")
    routing.reset_cache()
    gen = routing.active()
    wanted = buckets if isinstance(buckets, list) else parse_buckets(buckets, gen.space.virtual_buckets)
    there = [vb for vb in wanted if gen.routes[vb].partition == target]
    if there:
        raise InvalidInput(f"buckets {buckets_label(there)} are already on {target}.", code="already_on_target")
    _refuse_generation_change(gen)
    sources = {str(vb): gen.routes[vb].partition for vb in wanted}
    rows = sum(changelog.rows_count(alias, generation=gen.generation, buckets=[vb for vb in wanted
                                                                              if sources[str(vb)] == alias])
               for alias in sorted(set(sources.values())))
    with LEDGER.plan_transaction():
        LEDGER.refuse_overlap(wanted)
        m = BucketMigration.objects.create(
            bucket_space_version=gen.space.version, generation=gen.generation, buckets=wanted,
            source_partitions=sources, source_epochs={str(vb): gen.routes[vb].epoch for vb in wanted},
            target_partition=target, source_manifest_id=gen.manifest_id, rows_to_copy=rows, reason=reason,
            requested_by=actor.name, requested_channel=actor.channel, state_changed_at=timezone.now())
        audit_record(actor=actor, action="bucket_migration.plan", target_type="bucket_migration", target_id=str(m.pk),
                     params={"to": target, "buckets": buckets_label(wanted), "rowsToCopy": rows, "reason": reason,
                             "generation": gen.generation, "sourceManifestId": gen.manifest_id})
    return m


def _refuse_generation_change(gen: routing.GenerationRoutes) -> None:
    building = CountProjectionGeneration.objects.filter(status="SHADOW", scratch=False).exclude(
        generation=gen.generation).values_list("generation", flat=True)
    if building:
        raise BucketMigrations.state_conflict(f"generation {list(building)} is being built to replace generation "
                                     f"{gen.generation}; migrate after it is switched or dropped.",
                                     code="generation_changing")


def migration_approve(*, migration_id, actor: Actor) -> BucketMigration:
    """PREPARE, approved by `actor` (never the requester), then the system's job runs the protocol."""
    return LEDGER.approve(migration_id, actor=actor)


def migration_resume(*, migration_id, actor: Actor) -> BucketMigration:
    """A new job for an approved migration that is not finished; the protocol goes on from the ledger's cursor."""
    return LEDGER.resume(migration_id, actor=actor)


def migration_abort(*, migration_id, actor: Actor, reason: str) -> BucketMigration:
    """ABORTED, from any state before the CAS: the source fences are lifted back to ACTIVE, the target's
    copy and fences of the buckets are removed. After the CAS the target is the only authority and the
    source is never reopened (MIG-2): moving back is a reverse migration."""
    return LEDGER.abort(migration_id, actor=actor, reason=reason)


def migration_wait(migration_id: int, *, timeout_s: float, on_change=None) -> BucketMigration:
    """Until the migration is RETIRED, ABORTED or FAILED, or its job ended with it waiting; bounded."""
    return LEDGER.wait(migration_id, timeout_s=timeout_s, on_change=on_change)


def migrations_in_flight(buckets: list[int] | None = None) -> list[BucketMigration]:
    """Approved migrations before their VERIFY (ROUTE-7: a repair or a restore waits for them)."""
    qs = list(BucketMigration.objects.filter(state__in=IN_FLIGHT))
    if buckets is None:
        return qs
    wanted = set(buckets)
    return [m for m in qs if wanted & set(m.buckets)]
