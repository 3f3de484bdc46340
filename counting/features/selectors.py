"""Reads of the feature export: which users are deleted, the verification of every stored file against its
manifest and of the manifests against each other, and the newest and oldest periods kept. Never writes."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from counting.features import files, policy
from likes_project.eventlog.streams import entry_id_key
from relations.models import AccountStatus, AccountStatusValue

logger = logging.getLogger(__name__)


def deleted_among(user_ids) -> set[int]:
    """Which of these users' accounts are DELETED (their events are not exported). One query on `default`."""
    ids = [u for u in user_ids if isinstance(u, int) and not isinstance(u, bool)]
    if not ids:
        return set()
    return set(AccountStatus.objects.filter(user_id__in=ids, status=AccountStatusValue.DELETED)
               .values_list("user_id", flat=True))


@dataclass
class FileCheck:
    manifest: str
    file: str
    rows: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class Verification:
    checks: list[FileCheck]
    problems: list[str]  # of no single file: files no manifest names

    @property
    def ok(self) -> bool:
        return not self.problems and all(c.ok for c in self.checks)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "files": len(self.checks), "failed": sum(not c.ok for c in self.checks),
                "rows": sum(c.rows for c in self.checks), "problems": self.problems,
                "checks": [{"manifest": c.manifest, "file": c.file, "rows": c.rows, "ok": c.ok,
                            "problems": c.problems} for c in self.checks]}


def feature_export_verify() -> Verification:
    """Every stored manifest, in time order: its file read back whole (SHA-256, size, rows, every row's fields
    within the manifest's policy), its offsets in order, and against the manifest before it: periods that do not
    overlap, and in each partition offsets that continue exactly where the previous period's ended (neither a gap
    nor an overlap). A data file no manifest names is a problem too (a crash's leftover, or a planted file)."""
    checks, problems, previous = [], [], None
    for folder, names in files.days():
        named = set()
        for base in (n for n in names if n.endswith(files.MANIFEST)):
            check, manifest = _check(f"{folder}/{base}")
            named.add(check.file)
            if manifest is not None and previous is not None:
                check.problems += _continuity(previous, manifest)
            previous = manifest if manifest is not None else previous
            checks.append(check)
        problems += [f"orphan: {folder}/{n} is named by no manifest" for n in names
                     if not n.endswith(files.MANIFEST) and f"{folder}/{n}" not in named]
    return Verification(checks, problems)


def _check(name: str) -> tuple[FileCheck, dict | None]:
    try:
        manifest = files.manifest_read(name)
    except files.FileUnreadable as exc:
        return FileCheck(name, "", 0, [f"manifest_unreadable: {exc}"]), None
    check = FileCheck(name, str(manifest.get("file") or ""), 0)
    try:
        allowed = set(manifest["fieldPolicy"]["fields"])
        offsets = {p: (o["after"], o["first"], o["last"]) for p, o in manifest["offsets"].items()}
        start, end = policy.when(manifest["periodStart"]), policy.when(manifest["periodEnd"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        check.problems.append(f"manifest_invalid: {exc.__class__.__name__} {exc}")
        return check, None
    if not allowed <= set(policy.ROW_FIELDS):
        check.problems.append(f"policy_invalid: fields {sorted(allowed - set(policy.ROW_FIELDS))} are not allowed")
    if end <= start:
        check.problems.append("period_invalid: it ends before it starts")
    linkable = True
    for p, (after, first, last) in offsets.items():
        if not _ordered(after, first, last):
            check.problems.append(f"offsets_invalid: partition {p} after {after}, first {first}, last {last}")
            linkable = False  # not a link of the chain either
    outside: set[str] = set()
    try:
        with files.rows_read(check.file) as (rows, hashing):
            for row in rows:
                check.rows += 1
                outside |= set(row) - allowed
    except files.FileUnreadable as exc:
        check.problems.append(f"file_unreadable: {exc}")
        return check, manifest if linkable else None
    if hashing.sha.hexdigest() != manifest.get("sha256") or hashing.size != manifest.get("bytes"):
        check.problems.append(f"checksum_mismatch: SHA-256 {hashing.sha.hexdigest()} ({hashing.size} bytes), "
                              f"recorded {manifest.get('sha256')} ({manifest.get('bytes')} bytes)")
    if check.rows != manifest.get("rows"):
        check.problems.append(f"row_count_mismatch: {check.rows} rows, recorded {manifest.get('rows')}")
    if outside:
        check.problems.append(f"fields_outside_policy: {sorted(outside)}")
    return check, manifest if linkable else None


def _ordered(after, first, last) -> bool:
    """A partition's offsets in one manifest: nothing read (first and last None), or after < first <= last."""
    try:
        low = entry_id_key(after)
        return (first is None and last is None) or low < entry_id_key(first) <= entry_id_key(last)
    except (AttributeError, TypeError, ValueError):
        return False


def _continuity(before: dict, manifest: dict) -> list[str]:
    """What is wrong between two consecutive manifests (their periods, each partition's offsets)."""
    out = []
    if policy.when(manifest["periodStart"]) < policy.when(before["periodEnd"]):
        out.append(f"period_overlap: starts {manifest['periodStart']}, before the previous period's end "
                   f"{before['periodEnd']}")
    for p, o in manifest["offsets"].items():
        prior = before["offsets"].get(p)
        if prior is None:
            continue  # a partition the log did not have then
        through = prior["last"] or prior["after"]
        if entry_id_key(o["after"]) > entry_id_key(through):
            out.append(f"gap: partition {p} continues after {o['after']}, the previous period ended at {through}")
        elif entry_id_key(o["after"]) < entry_id_key(through) or (
                o["first"] and entry_id_key(o["first"]) <= entry_id_key(through)):
            out.append(f"overlap: partition {p} continues after {o['after']}, the previous period ended at {through}")
    return out


def manifest_edge(*, newest: bool) -> dict | None:
    """The newest (or oldest) readable manifest, with its period as datetimes (`start`, `end`); None: none kept."""
    for name in files.manifests(newest_first=newest):
        try:
            manifest = files.manifest_read(name)
            start, end = policy.when(manifest["periodStart"]), policy.when(manifest["periodEnd"])
            return {**manifest, "start": start, "end": end}
        except (files.FileUnreadable, KeyError, ValueError) as exc:
            logger.warning("feature export: manifest %s unreadable (%s)", name, exc)
    return None


def feature_export_newest() -> dt.datetime | None:
    """The end of the newest period exported (None: none kept)."""
    edge = manifest_edge(newest=True)
    return edge and edge["end"]


def feature_export_oldest() -> dt.datetime | None:
    """The start of the oldest period kept (None: none)."""
    edge = manifest_edge(newest=False)
    return edge and edge["start"]
