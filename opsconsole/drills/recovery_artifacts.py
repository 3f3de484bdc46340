"""Spec §7 drill 9 (T19, SNAP-9 … SNAP-11, INV-16): recovery snapshots damaged on purpose while commands flow. A
snapshot must never become SEALED, nor be used for a restore, when one of its artifacts was deleted, a row count or
checksum it records is wrong, or the route manifest it pins misses a bucket; an undamaged one, taken the same way
under the same load, must seal and pass its test-restore (the counter-example)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.scenarios import Context, Drill

REASON = "drill snapshot-artifact-tamper"


@dataclass
class Case:
    """One kind of damage: its name, the problem prefix the seal (and verification) must name, and what it does to
    the artifact records of a snapshot (the records it goes on with)."""

    name: str
    prefix: str
    damage: Callable[[object, list[dict]], list[dict]]
    snapshot_id: int | None = None
    status: str = ""
    failure: str = ""
    rebuilt: str = ""  # the status after a second build was asked for
    verified: list[str] = field(default_factory=list)
    restore: str = ""  # what the restore said


class SnapshotArtifactTamper(Drill):
    """Drill 9: four recovery snapshots are built through the snapshot service while the drill's commands flow, each
    damaged between its dump and its seal (the service's `after_dumped` hook): one artifact deleted from the storage,
    one recorded row count off by one, one recorded checksum changed, and the pinned route manifest swapped for a
    copy that lost a bucket (a copy the drill makes: the live manifest routes every process and is never touched).
    Each must end FAILED with the problem named, stay FAILED when built again, be called unusable by verification,
    and be refused by the restore before anything is written. A fifth, undamaged snapshot must seal; the same damage
    applied to its record afterwards must make it unusable and refused, and once its record is put back it must be
    usable again and pass its test-restore. The damaged snapshots stay FAILED with the drill's reason (retention
    drops their artifacts after a day); the drill's manifest copy is deleted at the end."""

    name = "snapshot-artifact-tamper"
    spec_numbers = (9,)
    summary = ("snapshots with a deleted artifact, a wrong row count or checksum, a manifest missing a bucket: never "
               "SEALED, never restored; an undamaged one seals")
    commands_succeed_while = "damaged recovery snapshots were being built"
    default_fault_s = 5.0

    def prepare(self, ctx: Context) -> None:
        from likes_project import leases
        from reconciliation.services.recovery import snapshot

        if leases.lease_is_held(snapshot.BUILD_LEASE):
            raise DrillRefused("a recovery snapshot is being built; run the drill once it has finished")
        self.broken_manifest: int | None = None
        self.sealed_id: int | None = None
        self.sealed_status = ""
        self.after_seal: list[Case] = []
        self.usable_again: dict = {}
        self.tested: dict = {}
        self.cases = [Case("artifact-deleted", "artifact_missing", self._delete_artifact),
                      Case("row-count", "row_count_mismatch", self._rows_wrong),
                      Case("checksum", "checksum_mismatch", self._checksum_wrong),
                      Case("manifest-missing-a-bucket", "manifest_incomplete", self._manifest_lost_a_bucket)]

    # --- the damage -------------------------------------------------------------------------------------

    @staticmethod
    def _with_rows(records: list[dict]) -> dict:
        return next((r for r in records if r.get("rows")), records[0])

    def _delete_artifact(self, snap, records):
        from reconciliation.services.recovery import artifacts

        victim = next((r for r in records if r["kind"] == "projection" and r.get("rows")), self._with_rows(records))
        artifacts.artifact_delete(victim["uri"])
        return records

    def _rows_wrong(self, snap, records):
        victim = self._with_rows(records)
        return [{**r, "rows": r["rows"] + 1} if r is victim else r for r in records]

    def _checksum_wrong(self, snap, records):
        victim = self._with_rows(records)
        flipped = ("0" if victim["sha256"][0] != "0" else "1") + victim["sha256"][1:]
        return [{**r, "sha256": flipped} if r is victim else r for r in records]

    def _manifest_lost_a_bucket(self, snap, records):
        from reconciliation.models import RecoverySnapshot

        RecoverySnapshot.objects.filter(pk=snap.pk).update(manifest_id=self._broken_manifest(snap.manifest_id))
        return records

    def _broken_manifest(self, manifest_id: int) -> int:
        """A copy of manifest `manifest_id`, SEALED with its row count and checksum, that lost bucket 0: what the
        pinned manifest would be had a bucket gone missing after its seal. Made once; deleted in `recover`."""
        from counting.models import CountRouteManifest, CountRouteManifestItem
        from counting.services.manifests import manifest_items

        if self.broken_manifest is None:
            source = CountRouteManifest.objects.get(pk=manifest_id)
            copy = CountRouteManifest.objects.create(bucket_space_version=source.bucket_space_version,
                                                     status=source.status, row_count=source.row_count,
                                                     checksum=source.checksum, sealed_at=source.sealed_at)
            CountRouteManifestItem.objects.bulk_create(
                CountRouteManifestItem(manifest_id=copy.pk, virtual_bucket=vb, physical_partition=p, route_epoch=e)
                for vb, p, e in manifest_items(manifest_id) if vb != 0)
            self.broken_manifest = copy.pk
        return self.broken_manifest

    # --- the snapshots ----------------------------------------------------------------------------------

    def _take(self, reason: str, damage=None):
        """A snapshot built by the snapshot service in this process (what its job runs), `damage` applied between
        the dump and the seal; a cut that aborted (a partition changed hands) is taken again, as the job does."""
        from django.conf import settings

        from reconciliation.services.recovery import snapshot

        snapshot.after_dumped = damage
        try:
            for _ in range(1 + settings.SNAPSHOT_ABORT_RETRIES):
                snap = snapshot.snapshot_create(actor=_actor(), reason=reason)
                snap = snapshot.snapshot_build(snap.pk)
                if not (snap.status == "FAILED" and snap.failure.startswith("aborted:")):
                    break
        finally:
            snapshot.after_dumped = None
        return snap

    def _refused(self, snap_id: int) -> tuple[list[str], str]:
        """Verification's problems with the snapshot, and what the restore said. The restore is asked only when
        verification refuses (it refuses by the same rules), so a broken rule never switches a live generation."""
        from reconciliation.models import RecoveryRestore
        from reconciliation.services.recovery import restore, snapshot

        actor = _actor()
        found = snapshot.snapshot_verify(snap_id, actor=actor)
        if found["usable"]:
            return [], "not asked: verification called it usable"
        try:
            restore.restore_execute(snap_id, actor=actor)
        except restore.SnapshotUnusable as exc:
            wrote = RecoveryRestore.objects.filter(snapshot_id=snap_id).exists()
            return found["problems"], "refused" + (" BUT a restore run was created" if wrote else "") + \
                f" ({'; '.join(exc.extra.get('problems', []))[:160]})"
        return found["problems"], "NOT refused"

    def inject(self, ctx: Context) -> str:
        from reconciliation.services.recovery import snapshot

        for case in self.cases:
            snap = self._take(f"{REASON}: {case.name} (damaged on purpose; never to be used)", case.damage)
            case.snapshot_id, case.status, case.failure = snap.pk, snap.status, snap.failure
            case.rebuilt = snapshot.snapshot_build(snap.pk).status  # a second build never seals it
            case.verified, case.restore = self._refused(snap.pk)
        sealed = self._take(f"{REASON}: undamaged (the counter-example)")
        self.sealed_id, self.sealed_status = sealed.pk, sealed.status
        if sealed.status == "SEALED":
            self._damage_after_seal(sealed)
        return "; ".join(f"{c.name}: snapshot {c.snapshot_id} {c.status}" for c in self.cases) + \
            f"; undamaged: snapshot {sealed.pk} {sealed.status}" + \
            (f" ({sealed.failure[:200]})" if sealed.failure else "") + \
            (f", the same damage after its seal refused: {[c.name for c in self.after_seal if _refused_for(c)]}"
             if self.after_seal else "")

    def _damage_after_seal(self, sealed) -> None:
        """The same damage to the sealed snapshot's record (its artifact records, its manifest), one at a time, each
        judged and then undone; the file deletion is recorded as the artifact missing from the record."""
        from reconciliation.models import RecoverySnapshot
        from reconciliation.services.recovery import snapshot

        original = {"artifacts": sealed.artifacts, "manifest_id": sealed.manifest_id}
        dropped = self._with_rows([r for r in sealed.artifacts if r["kind"] == "projection"] or sealed.artifacts)
        after = [("artifact-deleted", "artifact_missing", lambda recs: [r for r in recs if r is not dropped]),
                 ("row-count", "row_count_mismatch", lambda recs: self._rows_wrong(sealed, recs)),
                 ("checksum", "checksum_mismatch", lambda recs: self._checksum_wrong(sealed, recs))]
        try:
            for name, prefix, damage in after:
                RecoverySnapshot.objects.filter(pk=sealed.pk).update(artifacts=damage(list(sealed.artifacts)))
                case = Case(name, prefix, lambda s, r: r, snapshot_id=sealed.pk)
                case.verified, case.restore = self._refused(sealed.pk)
                RecoverySnapshot.objects.filter(pk=sealed.pk).update(**original)
                self.after_seal.append(case)
            RecoverySnapshot.objects.filter(pk=sealed.pk).update(manifest_id=self._broken_manifest(sealed.manifest_id))
            case = Case("manifest-missing-a-bucket", "manifest_incomplete", lambda s, r: r, snapshot_id=sealed.pk)
            case.verified, case.restore = self._refused(sealed.pk)
            self.after_seal.append(case)
        finally:
            RecoverySnapshot.objects.filter(pk=sealed.pk).update(**original)
        self.usable_again = snapshot.snapshot_verify(sealed.pk, actor=_actor())

    def recover(self, ctx: Context) -> str:
        from counting.models import CountRouteManifest, CountRouteManifestItem
        from reconciliation.models import RecoverySnapshot
        from reconciliation.services.recovery import restore, snapshot

        snapshot.after_dumped = None
        out = []
        if self.broken_manifest is not None:
            # The damaged snapshots that pinned it are FAILED for good: the copy goes, so no stray SEALED manifest
            # that lacks a bucket stays behind.
            CountRouteManifestItem.objects.filter(manifest_id=self.broken_manifest).delete()
            CountRouteManifest.objects.filter(pk=self.broken_manifest).delete()
            out.append(f"the drill's manifest copy {self.broken_manifest} deleted")
        if self.sealed_status == "SEALED":
            self.tested = restore.test_restore(self.sealed_id, actor=_actor())
            out.append(f"test-restore of snapshot {self.sealed_id}: "
                       f"{'ok' if self.tested.get('ok') else self.tested.get('problems')}")
        damaged = [c.snapshot_id for c in self.cases if c.snapshot_id is not None]
        ctx.notes.append(f"the damaged snapshots {damaged} stay FAILED with the reason {REASON!r} (retention drops "
                         "their artifacts after a day); the undamaged one stays SEALED")
        now = dict(RecoverySnapshot.objects.filter(pk__in=damaged).values_list("pk", "status"))
        out.append(f"damaged snapshots now {now}")
        return "; ".join(out)

    def judge(self, ctx: Context, fault) -> list[str]:
        from reconciliation.models import RecoverySnapshot

        failures = super().judge(ctx, fault)
        now = dict(RecoverySnapshot.objects.filter(pk__in=[c.snapshot_id for c in self.cases]).values_list(
            "pk", "status"))
        for c in self.cases:
            what = f"snapshot {c.snapshot_id} ({c.name})"
            if c.status != "FAILED" or c.prefix not in c.failure:
                failures.append(f"{what} ended {c.status}, not FAILED for {c.prefix}: {c.failure[:300]!r}")
            if c.rebuilt != "FAILED" or now.get(c.snapshot_id) != "FAILED":
                failures.append(f"{what} became {c.rebuilt} when built again, {now.get(c.snapshot_id)} now")
            failures += self._refusal_failures(what, c, "not_sealed")
        if self.sealed_status != "SEALED":
            failures.append(f"the undamaged snapshot {self.sealed_id} ended {self.sealed_status}, not SEALED")
        else:
            for c in self.after_seal:
                failures += self._refusal_failures(f"sealed snapshot {c.snapshot_id} with its {c.name} damaged", c,
                                                   c.prefix)
            if not self.usable_again.get("usable"):
                failures.append(f"sealed snapshot {self.sealed_id} is not usable once its record was put back: "
                                f"{self.usable_again.get('problems')}")
            if not self.tested.get("ok"):
                failures.append(f"the test-restore of sealed snapshot {self.sealed_id} failed: {self.tested}")
        return failures

    @staticmethod
    def _refusal_failures(what: str, c: Case, prefix: str) -> list[str]:
        out = []
        if not _refused_for(c, prefix):
            out.append(f"{what}: verification did not refuse it for {prefix}: {c.verified or 'usable'}")
        if not c.restore.startswith("refused") or "BUT" in c.restore:
            out.append(f"{what}: the restore was {c.restore}")
        return out


def _refused_for(c: Case, prefix: str | None = None) -> bool:
    """Verification named the problem (`prefix`, by default the case's own)."""
    return any(p.startswith(prefix or c.prefix) for p in c.verified)


def _actor():
    from likes_project.audit.services import system_actor

    return system_actor("drill")
