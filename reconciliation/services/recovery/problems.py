"""Why a recovery snapshot may not be sealed, or no longer be used (SNAP-9 … SNAP-11, INV-16; issue 12 §2,
issue 33 §3). Every problem starts with a stable prefix (D66) and, where only the facts can repair, names
that fallback.

  seal (`seal_problems`, also part of every verification): both artifacts of every partition, each read
       back as recorded (rows, SHA-256, header), the LIKED projection rows of a partition equal to what its
       vbuckets count (T18), the pinned manifest SEALED and complete (T19), the vector covering every
       partition of the stream contract (T17) and below no cut sealed before it (T17: offsets only advance);
  use  (`snapshot_problems`): the seal's conditions again, and what may change after it: each partition's
       stream still the one of the cut, holding every entry from nextOffset[p] on (not trimmed past it, not
       lost and written again), no offset gone backwards since the cut (the count consumer's checkpoint, the
       stream's last id), the manifest still the active one's, no dead letter open at the cut redriven since.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from counting.models import (
    CountBucketSpace,
    CountProjectionGeneration,
    CountRouteManifest,
    ManifestStatus,
    ProjectionGenerationStatus,
)
from counting.services.manifests import ManifestInvalid, manifest_verify
from counting.services.projection import COUNT_CONSUMER
from likes_project import metrics
from likes_project.eventlog import streams
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.eventlog.models import DeadLetter, DeadLetterStatus
from reconciliation.models import RecoverySnapshot, SnapshotStatus
from reconciliation.services.recovery import artifacts
from reconciliation.services.recovery.artifacts import KINDS, VBUCKET_COLUMNS

# --- the seal -----------------------------------------------------------------------------------------


def _totaller(key: tuple[str, str], totals: dict[tuple[str, str], int]) -> Callable[[bytes], None]:
    """A fold over one artifact's COPY rows: the LIKED relations of a projection artifact (its state column
    between two tabs: COPY escapes a tab inside a value), the sum of `active_count` of a vbuckets one."""
    totals[key] = 0
    if key[0] == "projection":
        def fold(chunk: bytes) -> None:
            totals[key] += chunk.count(b"\tLIKED\t")
    else:
        at = VBUCKET_COLUMNS.index("active_count")

        def fold(chunk: bytes) -> None:
            totals[key] += sum(int(line.split(b"\t")[at]) for line in chunk.splitlines())
    return fold


def _inconsistent(totals: dict[tuple[str, str], int]) -> list[str]:
    """SNAP-9: the buckets of a partition and its relation projection at the same watermark, so the LIKED
    relations of its projection artifact are exactly what its vbuckets artifact counts (REC-1 over the
    artifacts, per partition). A projection artifact that is empty or partial, or from another moment, fails
    it: buckets without the relation projection cannot replay an unlike (T18)."""
    out = []
    for alias in sorted({partition for _kind, partition in totals}):
        liked, counted = totals.get(("projection", alias)), totals.get(("vbuckets", alias))
        if liked is not None and counted is not None and liked != counted:
            out.append(f"artifact_inconsistent: the projection artifact of partition {alias} holds {liked} LIKED "
                       f"relations, its vbuckets artifact counts {counted} likes (buckets without the relation "
                       "projection at the same watermark cannot replay an unlike)")
    return out


def _regressed_since_earlier(snap: RecoverySnapshot) -> list[str]:
    """SNAP-11, T17: a cut of the same stream contract below the last one sealed before it, on any partition.
    Checkpoints only advance, so the log or the consumer's position went backwards in between."""
    earlier = (RecoverySnapshot.objects.filter(pk__lt=snap.pk, status__in=[SnapshotStatus.SEALED,
                                                                           SnapshotStatus.EXPIRED],
                                               stream_contract_version=snap.stream_contract_version)
               .exclude(offsets=[]).order_by("-pk").first())
    if earlier is None:
        return []
    then = {int(o["partition"]): o["through"] for o in earlier.offsets}
    out = []
    for o in snap.offsets:
        before = then.get(int(o["partition"]))
        if before is not None and streams.entry_id_key(o["through"]) < streams.entry_id_key(before):
            out.append(f"offset_regressed: partition {o['partition']} is cut through {o['through']}, below {before} "
                       f"of snapshot {earlier.pk} sealed before it; repair from the facts (--source facts)")
    return out


def seal_problems(snap: RecoverySnapshot) -> list[str]:
    """The SNAP-10 conditions that do not hold for `snap`'s recorded content (empty: it may be sealed,
    or still be used)."""
    problems = []
    aliases = set(settings.COUNT_PARTITION_ALIASES)
    have = {(a.get("kind"), a.get("partition")) for a in snap.artifacts}
    for alias in sorted(aliases):
        for kind in KINDS:
            if (kind, alias) not in have:
                problems.append(f"artifact_missing: no {kind} artifact of partition {alias} (buckets without the "
                                "relation projection cannot replay an unlike)")
    totals: dict[tuple[str, str], int] = {}
    for record in snap.artifacts:
        key = (record.get("kind"), record.get("partition"))
        found = artifacts.artifact_check(record, fold=_totaller(key, totals))
        problems += found
        if found:
            totals.pop(key, None)  # no verdict on the content of an artifact that is not what was recorded
    problems += _inconsistent(totals)
    problems += _regressed_since_earlier(snap)
    manifest = CountRouteManifest.objects.filter(pk=snap.manifest_id).first()
    if manifest is None or manifest.status != ManifestStatus.SEALED:
        problems.append(f"manifest_not_sealed: route manifest {snap.manifest_id} is not SEALED")
    else:
        space = CountBucketSpace.objects.filter(version=snap.bucket_space_version).first()
        try:
            manifest_verify(manifest, space.virtual_buckets if space else -1)
        except ManifestInvalid as exc:
            problems.append(f"manifest_incomplete: {exc}")
    contract = streams.active_contract()
    parts = sorted(int(o.get("partition", -1)) for o in snap.offsets)
    if snap.stream_contract_version != contract.version or parts != list(range(contract.partitions)):
        problems.append(f"offset_vector_incomplete: the vector names partitions {parts} of stream contract "
                        f"v{snap.stream_contract_version}; the topic has {contract.partitions} partitions "
                        f"(contract v{contract.version})")
    return problems


# --- use (SNAP-11) ----------------------------------------------------------------------------------


def _rewritten(p: int, o: dict, kept: streams.Retention) -> str:
    """Why partition p's stream is not the one the cut `o` was taken from (empty: it is). The same stream
    only ever grows: never fewer entries added, never a lower last id; the entry that ended it at the cut
    is still there unless retention dropped it; and once retention dropped everything up to it, it holds
    no more entries than were added since. A stream lost and written again (the lost-tail check republishes
    it) fails one of these, however many entries it has been given since."""
    added = int(o.get("streamAdded", 0))
    if kept.added < added:
        return f"{kept.added} entries added, {added} at the cut"
    last = o.get("streamLast")
    if not last or last == "0-0":
        return ""  # an older snapshot, or a stream empty at the cut: nothing of it is in the snapshot
    now = streams.last_generated_id(p)
    if streams.entry_id_key(now) < streams.entry_id_key(last):
        return f"its last id is {now}, {last} at the cut"
    if streams.entry_id_key(kept.trimmed_below) <= streams.entry_id_key(last) and \
            streams.entry_id_key(kept.deleted_through) < streams.entry_id_key(last):
        if last not in streams.entry_ids_between(p, last, last):
            return f"{last}, its last entry at the cut, is gone although retention kept it"
    elif streams.entry_id_key(kept.trimmed_below) > streams.entry_id_key(last):
        held = streams.length(p)
        if held > kept.added - added:
            return f"it holds {held} entries after the cut, only {kept.added - added} were added since"
    return ""


def stream_problems(offsets: list[dict]) -> list[str]:
    """Partitions whose stream no longer holds every entry the replay from nextOffset[p] needs: trimmed
    or deleted at or past it, or lost and written again since the cut (SNAP-11)."""
    out = []
    for o in offsets:
        p = int(o["partition"])
        kept = streams.retention(p)
        first_needed = streams.entry_id_key(o["nextOffset"])
        gone = max(streams.entry_id_key(kept.trimmed_below), (lambda k: (k[0], k[1] + 1))(
            streams.entry_id_key(kept.deleted_through)))
        if gone > first_needed:
            out.append(f"offset_past_retention: partition {p} needs the entries from "
                       f"{o['nextOffset']} on, but the stream has dropped those below {gone[0]}-{gone[1]}; repair "
                       "from the facts (--source facts)")
        elif why := _rewritten(p, o, kept):
            out.append(f"offset_past_retention: the stream of partition {p} was lost and written again since the "
                       f"cut ({why}); repair from the facts (--source facts)")
    return out


def _regressed_since_cut(offsets: list[dict]) -> list[str]:
    """SNAP-11, T17: an offset that went backwards after the cut: the count consumer's durable checkpoint,
    or the stream's last id, now below the cut's `through[p]` (checkpoints only advance: a restored or
    reset checkpoint table, a stream rolled back)."""
    done = checkpoints_get(COUNT_CONSUMER)
    out = []
    for o in offsets:
        p, through = int(o["partition"]), streams.entry_id_key(o["through"])
        at = done.get(p, "0-0")
        if streams.entry_id_key(at) < through:
            out.append(f"offset_regressed: the count consumer's checkpoint of partition {p} is {at}, below the cut's "
                       f"{o['through']}; repair from the facts (--source facts)")
        head = streams.last_generated_id(p)
        if streams.entry_id_key(head) < through:
            out.append(f"offset_regressed: the stream of partition {p} ends at {head}, below the cut's "
                       f"{o['through']}; repair from the facts (--source facts)")
    return out


def snapshot_problems(snap: RecoverySnapshot) -> list[str]:
    """Why `snap` cannot be used for recovery now (empty: usable). SNAP-11: not SEALED, an artifact that
    fails verification, a vector lacking a partition, an offset the stream no longer holds (trimmed, or a
    stream lost and written again), an offset that went backwards, a manifest that is not the active one's,
    a dead letter redriven since the cut."""
    if snap.status != SnapshotStatus.SEALED:
        return [f"not_sealed: snapshot {snap.pk} is {snap.status}" + (f" ({snap.failure})" if snap.failure else "")]
    problems = seal_problems(snap)
    problems += stream_problems(snap.offsets)
    problems += _regressed_since_cut(snap.offsets)
    gen = CountProjectionGeneration.objects.filter(status=ProjectionGenerationStatus.ACTIVE).first()
    if gen is None or gen.active_manifest_id != snap.manifest_id or gen.bucket_space_version != \
            snap.bucket_space_version:
        problems.append(f"manifest_moved: the active generation routes by manifest "
                        f"{gen.active_manifest_id if gen else None}, the snapshot by {snap.manifest_id}")
    redriven = list(DeadLetter.objects.filter(pk__in=snap.dead_letters_at_cut, status=DeadLetterStatus.RESOLVED)
                    .values_list("pk", flat=True)[:10])
    if redriven:
        problems.append(f"dead_letters_redriven_since: dead letters {redriven} were applied after the cut, below "
                        "its offsets; repair from the facts (--source facts)")
    for problem in problems:  # M7, M12: holes in the offset vector, offsets past retention, and the rest, counted
        metrics.inc("likes_snapshot_problems_total", problem=problem.split(":", 1)[0])
    return problems
