"""The migration ledger's lifecycle (MIG-2; issue 13 §2, §6): plan, approve, abort, and the one table of
allowed transitions every state change goes through.

  plan (operator) -> AWAITING_APPROVAL -> approve (another operator; the database refuses the requester)
  -> PREPARE -> COPYING -> CATCHING_UP -> CUTOVER -> VERIFY -> RETIRED
  ABORTED: by an operator, from any state before the CAS (never after: a reverse migration moves back)
  FAILED: the protocol found the frozen contract broken (the bucket space, generation or a route moved)

Every transition is audited in the transaction that makes it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from counting import routing
from counting.models import BucketMigration, CountProjectionGeneration, MigrationState
from counting.models.migration import TERMINAL
from counting.services import route_switch
from counting.services.migration import changelog
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import Conflict, Forbidden, InvalidInput, NotFound
from likes_project.ledgers import ledger_transition, ledger_wait
from likes_project.ranges import parse_ranges, ranges_label

S = MigrationState
PLAN_PERMISSION = "counting.plan_bucketmigration"
APPROVE_PERMISSION = "counting.approve_bucketmigration"
MIGRATION_JOB = "counting.bucket_migration"
EXECUTOR = "bucket-migration"
_PLAN_LOCK = 0x4C4B4D47  # "LKMG": plans are serialised, so two overlapping ones cannot both pass the check

TRANSITIONS: dict[str, frozenset[str]] = {
    S.AWAITING_APPROVAL: frozenset({S.PREPARE, S.ABORTED}),
    S.PREPARE: frozenset({S.COPYING, S.ABORTED, S.FAILED}),
    S.COPYING: frozenset({S.CATCHING_UP, S.ABORTED, S.FAILED}),
    S.CATCHING_UP: frozenset({S.CUTOVER, S.ABORTED, S.FAILED}),
    S.CUTOVER: frozenset({S.VERIFY, S.ABORTED, S.FAILED}),  # VERIFY only with the CAS, in its transaction
    S.VERIFY: frozenset({S.RETIRED}),
    S.RETIRED: frozenset(),
    S.ABORTED: frozenset(),
    S.FAILED: frozenset(),
}
BEFORE_CAS = frozenset({S.AWAITING_APPROVAL, S.PREPARE, S.COPYING, S.CATCHING_UP, S.CUTOVER})
IN_FLIGHT = frozenset({S.PREPARE, S.COPYING, S.CATCHING_UP, S.CUTOVER})  # writers must wait for these


class MigrationNotFound(NotFound):
    code = "migration_not_found"
    default_message = "No such bucket migration."


class MigrationOverlap(Conflict):
    code = "migration_overlap"
    default_message = "Another migration that is not finished moves some of these buckets."


class MigrationStateConflict(Conflict):
    code = "migration_state"


class SelfApproval(Forbidden):
    code = "self_approval"
    default_message = "The requester of a migration cannot approve it; another operator must."


class TransitionRefused(Conflict):
    code = "migration_transition_refused"


def migration_get(migration_id) -> BucketMigration:
    try:
        return BucketMigration.objects.get(pk=int(migration_id))
    except (BucketMigration.DoesNotExist, ValueError, TypeError):
        raise MigrationNotFound(f"No bucket migration {migration_id!r}.") from None


def transition(m: BucketMigration, to: str, *, actor: Actor, params: dict | None = None, **fields) -> BucketMigration:
    """Move `m` to `to` if the table allows it and the row still is in the state `m` was read in (a
    compare-and-set: two runners cannot both move it). In the caller's transaction on `default`, if any."""
    return ledger_transition(m, to, transitions=TRANSITIONS, terminal=TERMINAL, refused=TransitionRefused,
                             what=f"migration {m.pk}", target_type="bucket_migration", actor=actor, params=params,
                             **fields)


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
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("A migration needs a reason.", code="reason_required")
    if actor.channel == "cli" and actor.name.startswith("os:"):
        raise InvalidInput("A migration plan names its operator: --actor USER.", code="actor_required")
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
    with transaction.atomic(using="default", durable=True):
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_PLAN_LOCK])
        _refuse_overlap(wanted)
        m = BucketMigration.objects.create(
            bucket_space_version=gen.space.version, generation=gen.generation, buckets=wanted,
            source_partitions=sources, source_epochs={str(vb): gen.routes[vb].epoch for vb in wanted},
            target_partition=target, source_manifest_id=gen.manifest_id, rows_to_copy=rows, reason=reason,
            requested_by=actor.name, requested_channel=actor.channel, state_changed_at=timezone.now())
        audit_record(actor=actor, action="bucket_migration.plan", target_type="bucket_migration", target_id=str(m.pk),
                     params={"to": target, "buckets": buckets_label(wanted), "rowsToCopy": rows, "reason": reason,
                             "generation": gen.generation, "sourceManifestId": gen.manifest_id})
    return m


def _refuse_overlap(buckets: list[int], *, besides: int | None = None) -> None:
    wanted = set(buckets)
    for other in BucketMigration.objects.exclude(state__in=TERMINAL).exclude(pk=besides):
        common = wanted & set(other.buckets)
        if common:
            raise MigrationOverlap(f"migration {other.pk} ({other.state}) also moves buckets "
                                   f"{buckets_label(sorted(common))}; finish or abort it first.")


def _refuse_generation_change(gen: routing.GenerationRoutes) -> None:
    building = CountProjectionGeneration.objects.filter(status="SHADOW", scratch=False).exclude(
        generation=gen.generation).values_list("generation", flat=True)
    if building:
        raise MigrationStateConflict(f"generation {list(building)} is being built to replace generation "
                                     f"{gen.generation}; migrate after it is switched or dropped.",
                                     code="generation_changing")


def migration_approve(*, migration_id, actor: Actor) -> BucketMigration:
    """PREPARE, approved by `actor` (never the requester), then the system's job runs the protocol."""
    from likes_project.audit.services import system_actor
    from likes_project.opsjobs.services import job_start

    m = migration_get(migration_id)
    if m.state != S.AWAITING_APPROVAL:
        raise MigrationStateConflict(f"migration {m.pk} is {m.state}; only AWAITING_APPROVAL can be approved.",
                                     code="migration_not_awaiting_approval")
    if actor.name == m.requested_by:
        with transaction.atomic(using="default", durable=True):
            audit_record(actor=actor, action="bucket_migration.approve", target_type="bucket_migration",
                         target_id=str(m.pk), outcome="refused", params={"reason": "self_approval"})
        raise SelfApproval()
    _refuse_generation_change(routing.active())
    try:
        # Exclusive on the route table for the approval's commit: a running repair (which must never overlap
        # a copy, ROUTE-7) or a snapshot being cut makes the approval wait, then refuse.
        with route_switch.switch_exclusive(f"approve migration {m.pk}", timeout_s=5.0), \
                transaction.atomic(using="default", durable=True):
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_PLAN_LOCK])
            _refuse_overlap(m.buckets, besides=m.pk)
            m = transition(m, S.PREPARE, actor=actor, approved_by=actor.name, approved_at=timezone.now())
    except IntegrityError:  # the database's own refusal (migration_not_approved_by_requester)
        raise SelfApproval() from None
    job = job_start(kind=MIGRATION_JOB, actor=system_actor(EXECUTOR), params={"migrationId": m.pk},
                    target=f"bucket migration {m.pk}")
    BucketMigration.objects.filter(pk=m.pk).update(job_id=job.pk)
    return migration_get(m.pk)


def migration_resume(*, migration_id, actor: Actor) -> BucketMigration:
    """Start a new job for an approved migration that is not finished (its worker died, or a step
    was refused for now); the protocol goes on from the ledger's cursor. A RETIRED one whose source
    copy is still kept is cleaned up if its retention has passed."""
    from likes_project.audit.services import system_actor
    from likes_project.opsjobs.models import JobStatus, OpsJob
    from likes_project.opsjobs.services import job_start

    m = migration_get(migration_id)
    if m.state in (S.AWAITING_APPROVAL, S.ABORTED, S.FAILED) or (m.state == S.RETIRED and m.source_cleaned_at):
        raise MigrationStateConflict(f"migration {m.pk} is {m.state}; there is nothing to resume.",
                                     code="migration_not_resumable")
    running = OpsJob.objects.filter(pk=m.job_id, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).first()
    if running is not None:
        raise MigrationStateConflict(f"migration {m.pk} is being run by job {running.pk}.", code="migration_running")
    with transaction.atomic(using="default", durable=True):
        audit_record(actor=actor, action="bucket_migration.resume", target_type="bucket_migration",
                     target_id=str(m.pk), params={"state": m.state})
    job = job_start(kind=MIGRATION_JOB, actor=system_actor(EXECUTOR), params={"migrationId": m.pk},
                    target=f"bucket migration {m.pk}")
    BucketMigration.objects.filter(pk=m.pk).update(job_id=job.pk, error="")
    return migration_get(m.pk)


def migration_abort(*, migration_id, actor: Actor, reason: str) -> BucketMigration:
    """ABORTED, from any state before the CAS: the source fences are lifted back to ACTIVE, the target's
    copy and fences of the buckets are removed. After the CAS the target is the only authority and the
    source is never reopened (MIG-2): moving back is a reverse migration."""
    from counting.services.migration import protocol

    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("An abort needs a reason.", code="reason_required")
    m = migration_get(migration_id)
    if m.state not in BEFORE_CAS:
        raise MigrationStateConflict(f"migration {m.pk} is {m.state}: past the cutover (or finished), it cannot be "
                                     "aborted; plan a reverse migration to move the buckets back.",
                                     code="migration_past_cutover")
    protocol.undo_before_cas(m)
    with transaction.atomic(using="default", durable=True):
        m = transition(migration_get(m.pk), S.ABORTED, actor=actor, params={"reason": reason}, abort_reason=reason)
    routing.reset_cache()
    return m


def migration_report(m: BucketMigration) -> dict:
    """The ledger as the commands print it (`bucket_migration_show --json`)."""
    return {
        "migrationId": m.pk, "status": m.state, "buckets": len(m.buckets), "bucketRange": buckets_label(m.buckets),
        "bucketList": m.buckets,
        "target": m.target_partition, "sources": sorted(set(m.source_partitions.values())),
        "bucketSpaceVersion": m.bucket_space_version, "generation": m.generation,
        "sourceManifestId": m.source_manifest_id, "targetManifestId": m.target_manifest_id,
        "sourceEpochs": sorted(set(m.source_epochs.values())),
        "targetEpochs": sorted({e + 1 for e in m.source_epochs.values()}),
        "rowsToCopy": m.rows_to_copy, "copiedRows": m.copied_rows, "replayedEvents": m.replayed_events,
        "catchupPasses": m.catchup_passes, "copyCursor": m.copy_cursor, "baseline": m.baseline,
        "replayNextPosition": m.replay_next_position, "finalWatermark": m.final_watermark,
        "cutoverCheckpointRef": m.cutover_checkpoint_ref, "cutoverStreamOffsets": m.cutover_stream_offsets,
        "writePauseMs": m.write_pause_ms, "verify": m.verify_result, "reason": m.reason,
        "requestedBy": m.requested_by, "approvedBy": m.approved_by or None, "abortReason": m.abort_reason or None,
        "error": m.error or None, "jobId": m.job_id,
        "createdAt": _iso(m.created_at), "approvedAt": _iso(m.approved_at), "cutoverAt": _iso(m.cutover_at),
        "verifiedAt": _iso(m.verified_at), "finishedAt": _iso(m.finished_at),
        "sourceCleanupAfter": _iso(m.source_cleanup_after), "sourceCleanedAt": _iso(m.source_cleaned_at),
    }


def _iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def migration_wait(migration_id: int, *, timeout_s: float, on_change=None) -> BucketMigration:
    """Until the migration is RETIRED, ABORTED or FAILED, or its job ended with it waiting; bounded."""
    return ledger_wait(lambda: migration_get(migration_id), timeout_s=timeout_s, on_change=on_change)


def migrations_in_flight(buckets: list[int] | None = None) -> list[BucketMigration]:
    """Approved migrations before their VERIFY (ROUTE-7: a repair or a restore waits for them)."""
    qs = list(BucketMigration.objects.filter(state__in=IN_FLIGHT))
    if buckets is None:
        return qs
    wanted = set(buckets)
    return [m for m in qs if wanted & set(m.buckets)]
