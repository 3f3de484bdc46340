"""The export's files in the storage `feature_exports` (a directory, or an S3 bucket through django-storages): the
only module that builds their names, writes, lists or reads them.

    features/v<policy>/YYYY/MM/DD/HH.jsonl.gz          one period's rows (gzip JSON Lines)
    features/v<policy>/YYYY/MM/DD/HH.r<n>.jsonl.gz     the same period after its n-th erasure rewrite
    features/v<policy>/YYYY/MM/DD/HH.manifest.json     what the period holds: the file it names is the truth

(`HHMMSS` instead of `HH` when the period is not a whole number of hours.) A name sorts with its time, so a walk of
the tree in name order is a walk in time order. Every write is whole or nothing: a filesystem storage writes beside
the target and renames over it; S3 replaces an object with one PUT (`file_overwrite`)."""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import hashlib
import json
import os
import tempfile
import zlib
from collections.abc import Iterator

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import storages

from likes_project.hashing import HashingReader

STORAGE_ALIAS = "feature_exports"
ROOT = "features"
MANIFEST = ".manifest.json"
DATA = ".jsonl.gz"


class FileUnreadable(Exception):
    """A stored file is missing, truncated or not gzip JSON Lines."""


def storage():
    return storages[STORAGE_ALIAS]


def stem(*, policy: int, start_ms: int, file_s: int) -> str:
    """The period's name without its suffix: features/v1/2026/12/06/13."""
    at = dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC)
    return f"{ROOT}/v{policy}/{at:%Y/%m/%d}/" + (f"{at:%H}" if file_s % 3600 == 0 else f"{at:%H%M%S}")


def data_name(period_stem: str, rewrites: int) -> str:
    return period_stem + (DATA if not rewrites else f".r{rewrites}{DATA}")


def manifest_name(period_stem: str) -> str:
    return period_stem + MANIFEST


def stem_of(name: str) -> str:
    """The period's stem of any of its files' names (manifest, data file, rewrite)."""
    folder, _, base = name.rpartition("/")
    return f"{folder}/{base.partition('.')[0]}"


def _listdir(path: str) -> tuple[list[str], list[str]]:
    try:
        dirs, files = storage().listdir(path)
    except FileNotFoundError:
        return [], []
    return sorted(dirs), sorted(files)


def days(*, newest_first: bool = False) -> Iterator[tuple[str, list[str]]]:
    """Every day directory that holds files, in time order (or newest first): (its path, its file names)."""
    for version in sorted(_listdir(ROOT)[0], reverse=newest_first):
        for year in sorted(_listdir(f"{ROOT}/{version}")[0], reverse=newest_first):
            for month in sorted(_listdir(f"{ROOT}/{version}/{year}")[0], reverse=newest_first):
                for day in sorted(_listdir(f"{ROOT}/{version}/{year}/{month}")[0], reverse=newest_first):
                    path = f"{ROOT}/{version}/{year}/{month}/{day}"
                    files = _listdir(path)[1]
                    if files:
                        yield path, sorted(files, reverse=newest_first)


def manifests(*, newest_first: bool = False) -> Iterator[str]:
    """The names of every manifest, in time order (or newest first)."""
    for path, files in days(newest_first=newest_first):
        yield from (f"{path}/{f}" for f in files if f.endswith(MANIFEST))


def manifest_read(name: str) -> dict:
    try:
        with storage().open(name, "rb") as fh:
            out = json.loads(fh.read())
    except (OSError, ValueError) as exc:
        raise FileUnreadable(f"{name}: {exc.__class__.__name__}") from None
    if not isinstance(out, dict):
        raise FileUnreadable(f"{name}: not a JSON object")
    return out


def put(name: str, content: File) -> None:
    """Store `content` as `name`, replacing what is there, whole or not at all."""
    target = storage()
    try:
        path = target.path(name)
    except NotImplementedError:  # object storage: one PUT replaces the object whole
        saved = target.save(name, content)
        if saved != name:
            raise RuntimeError(f"the storage saved {name} as {saved}: it must overwrite (file_overwrite)") from None
        return
    os.replace(target.path(target.save(name + ".part", content)), path)


def put_json(name: str, payload: dict) -> None:
    put(name, ContentFile(json.dumps(payload, sort_keys=True, indent=1).encode() + b"\n", name=os.path.basename(name)))


def delete(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        storage().delete(name)


def period_files(period_stem: str) -> list[str]:
    """Every stored file of one period: its manifest, its data file, and any left over (an older rewrite, a write
    a crash cut short)."""
    folder, _, base = period_stem.rpartition("/")
    return [f"{folder}/{f}" for f in _listdir(folder)[1] if f.startswith(base + ".")]


def others_drop(period_stem: str, *, keep: str) -> None:
    """Delete the period's data files other than `keep` (what a rewrite or a re-export replaced)."""
    for name in period_files(period_stem):
        if name != keep and not name.endswith(MANIFEST):
            delete(name)


def period_delete(period_stem: str) -> None:
    """Delete every file of a period (its data first: a manifest never names a file that is gone while it stays
    readable), and its day directory once empty (on a filesystem; object storage has no directories)."""
    names = period_files(period_stem)
    for name in sorted(names, key=lambda n: n.endswith(MANIFEST)):
        delete(name)
    with contextlib.suppress(NotImplementedError, OSError):  # not empty yet, or not a filesystem
        os.rmdir(storage().path(period_stem.rpartition("/")[0]))


class LinesFile:
    """A gzip JSON Lines file written to a local temporary file (memory stays bounded by a row), then stored whole.
    The gzip header carries no time, so the same rows always make the same bytes and the same SHA-256."""

    def __init__(self) -> None:
        self._raw = tempfile.NamedTemporaryFile(prefix="features-", suffix=DATA, delete=False)  # noqa: SIM115
        self._gz = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=6, mtime=0)
        self.rows = 0

    def __enter__(self) -> LinesFile:
        return self

    def __exit__(self, *exc) -> None:
        self._gz.close()
        self._raw.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._raw.name)

    def write(self, row: dict) -> None:
        self._gz.write(json.dumps(row, separators=(",", ":")).encode() + b"\n")
        self.rows += 1

    def store(self, name: str) -> tuple[str, int]:
        """Close it, store it as `name`; its (SHA-256, bytes)."""
        self._gz.close()
        self._raw.close()
        sha, size = hashlib.sha256(), 0
        with open(self._raw.name, "rb") as fh:
            while block := fh.read(1 << 20):
                sha.update(block)
                size += len(block)
            fh.seek(0)
            put(name, File(fh, name=os.path.basename(name)))
        return sha.hexdigest(), size


@contextlib.contextmanager
def rows_read(name: str) -> Iterator[tuple[Iterator[dict], HashingReader]]:
    """Open a stored data file: an iterator of its rows, and the hasher whose `sha` / `size` are those of the stored
    bytes once the iterator is exhausted. Raises FileUnreadable (missing, truncated, not gzip JSON Lines)."""
    try:
        fh = storage().open(name, "rb")
    except OSError as exc:
        raise FileUnreadable(f"{name} cannot be opened ({exc.__class__.__name__})") from None
    hashing = HashingReader(fh)

    def rows() -> Iterator[dict]:
        try:
            with gzip.GzipFile(fileobj=hashing, mode="rb") as gz:
                for line in gz:
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise ValueError("a row is not a JSON object")
                    yield row
            hashing.read()  # the gzip trailer may be left unread: hash the file to its end
        except (OSError, EOFError, ValueError, zlib.error) as exc:  # a flipped byte is a zlib.error
            raise FileUnreadable(f"{name} is truncated or corrupt ({exc.__class__.__name__})") from None

    try:
        yield rows(), hashing
    finally:
        fh.close()
