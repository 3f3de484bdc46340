"""Recovery snapshot artifacts: their format and their storage (issue 12 §3).

One artifact is one table (`projection` or `vbuckets`) of one generation on one count partition:

  gzip( header line: {"format": "likes-recovery-artifact", "schemaVersion": 1, "kind", "partition",
                      "generation", "columns": [...], ...} "\\n"
        COPY text rows of `columns`, in key order )

Written and read as streams: the rows come from `COPY ... TO STDOUT` in chunks and go into a local
temporary file (gzip), then to the storage alias "recovery_snapshots" (a directory, or an S3 bucket
through django-storages); reading streams the stored file back through gzip into `COPY ... FROM STDIN`.
Memory stays bounded by one chunk whatever the table size. The SHA-256 is of the stored (compressed)
bytes; the row count is of the data lines.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from django.conf import settings
from django.core.files import File
from django.core.files.storage import storages

from counting.models import LikeCountProjection, VideoLikeCountVbucket
from likes_project.hashing import HashingReader

# The columns of each artifact kind, in COPY order, and the key order of its rows.
PROJECTION_COLUMNS = ("user_id", "video_id", "projected_state", "projected_version", "bucket_space_version",
                      "virtual_bucket", "updated_at")
VBUCKET_COLUMNS = ("video_id", "virtual_bucket", "bucket_space_version", "active_count", "bucket_version", "frozen",
                   "updated_at")
KINDS = {
    "projection": (LikeCountProjection, PROJECTION_COLUMNS, "user_id, video_id"),
    "vbuckets": (VideoLikeCountVbucket, VBUCKET_COLUMNS, "video_id, virtual_bucket"),
}

FORMAT = "likes-recovery-artifact"
SCHEMA_VERSION = 1
STORAGE_ALIAS = "recovery_snapshots"
URI_SCHEME = "snapshot-storage://"


@dataclass(frozen=True)
class Artifact:
    kind: str
    partition: str
    uri: str
    rows: int
    sha256: str
    bytes: int

    def as_dict(self) -> dict:
        return {"kind": self.kind, "partition": self.partition, "uri": self.uri, "rows": self.rows,
                "sha256": self.sha256, "bytes": self.bytes}


class ArtifactInvalid(Exception):
    """An artifact cannot be read back as what was recorded (missing, truncated, tampered, other schema)."""


def storage():
    return storages[STORAGE_ALIAS]


def _name(uri: str) -> str:
    if not uri.startswith(URI_SCHEME):
        raise ArtifactInvalid(f"not a snapshot storage uri: {uri!r}")
    return uri[len(URI_SCHEME):]


def artifact_write(*, name: str, header: dict, chunks: Iterable[bytes]) -> Artifact:
    """Stream `chunks` (COPY text, whole lines) into a new stored artifact `name`; returns its record."""
    head = {"format": FORMAT, "schemaVersion": SCHEMA_VERSION, **header}
    rows = 0
    with tempfile.NamedTemporaryFile(prefix="snapshot-", suffix=".gz", delete=False) as raw:
        tmp = raw.name
        try:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3) as gz:
                gz.write(json.dumps(head, sort_keys=True, separators=(",", ":")).encode() + b"\n")
                for chunk in chunks:
                    rows += chunk.count(b"\n")
                    gz.write(chunk)
        except BaseException:
            os.unlink(tmp)
            raise
    try:
        digest, size = _file_digest(tmp)
        with open(tmp, "rb") as fh:
            stored = storage().save(name, File(fh, name=os.path.basename(name)))
    finally:
        os.unlink(tmp)
    return Artifact(head["kind"], head["partition"], URI_SCHEME + stored, rows, digest, size)


def _file_digest(path: str) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


def artifact_stream(uri: str, *, chunk_bytes: int = 1 << 20) -> tuple[dict, Iterator[bytes], HashingReader]:
    """Open a stored artifact: its header, an iterator of COPY text chunks (whole lines), and the hasher
    whose `sha` / `size` are final once the iterator is exhausted. Raises ArtifactInvalid."""
    name = _name(uri)
    try:
        fh = storage().open(name, "rb")
    except (FileNotFoundError, OSError) as exc:
        raise ArtifactInvalid(f"artifact {uri} cannot be opened: {exc.__class__.__name__}") from None
    hashing = HashingReader(fh)
    gz = gzip.GzipFile(fileobj=hashing, mode="rb")
    try:
        header = json.loads(gz.readline())
    except (OSError, EOFError, ValueError, zlib.error) as exc:  # a flipped byte is a zlib.error, not an OSError
        fh.close()
        raise ArtifactInvalid(f"artifact {uri} has no readable header ({exc.__class__.__name__})") from None
    if header.get("format") != FORMAT or header.get("schemaVersion") != SCHEMA_VERSION:
        fh.close()
        raise ArtifactInvalid(f"artifact {uri} is {header.get('format')} schema {header.get('schemaVersion')}, "
                              f"not {FORMAT} schema {SCHEMA_VERSION}")

    def chunks() -> Iterator[bytes]:
        rest = b""
        try:
            while True:
                try:
                    block = gz.read(chunk_bytes)
                except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
                    raise ArtifactInvalid(f"artifact {uri} is truncated or corrupt ({exc.__class__.__name__})") \
                        from None
                if not block:
                    break
                block = rest + block
                cut = block.rfind(b"\n") + 1
                rest = block[cut:]
                if cut:
                    yield block[:cut]
            if rest:
                raise ArtifactInvalid(f"artifact {uri} ends inside a row (truncated)")
            hashing.read()  # the gzip trailer may be left unread: hash the file to its end
        finally:
            fh.close()

    return header, chunks(), hashing


def _stored_digest(uri: str) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with storage().open(_name(uri), "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


def artifact_check(record: dict, *, fold: Callable[[bytes], None] | None = None) -> list[str]:
    """Read a stored artifact back in full: the problems with it (empty when its SHA-256, size, header
    and rows are what `record` says). `fold(chunk)` sees every chunk of COPY rows on the way (whole lines),
    for a check of the content in the same read."""
    uri = record.get("uri", "")
    try:
        digest, size = _stored_digest(uri)
    except (FileNotFoundError, OSError, ArtifactInvalid) as exc:
        return [f"artifact_missing: {uri} cannot be read ({exc.__class__.__name__})"]
    problems = []
    if digest != record.get("sha256") or size != record.get("bytes", size):
        problems.append(f"checksum_mismatch: {uri} has SHA-256 {digest} ({size} bytes), recorded "
                        f"{record.get('sha256')} ({record.get('bytes')} bytes)")
    try:
        header, chunks, _hashing = artifact_stream(uri)
        rows = 0
        for chunk in chunks:
            rows += chunk.count(b"\n")
            if fold is not None:
                fold(chunk)
    except ArtifactInvalid as exc:
        return [*problems, f"artifact_unreadable: {exc}"]
    if header.get("kind") != record.get("kind") or header.get("partition") != record.get("partition"):
        problems.append(f"artifact_header_mismatch: {uri} says {header.get('kind')} of "
                        f"{header.get('partition')}, recorded {record.get('kind')} of {record.get('partition')}")
    if rows != record.get("rows"):
        problems.append(f"row_count_mismatch: {uri} has {rows} rows, recorded {record.get('rows')}")
    return problems


def artifact_delete(uri: str) -> None:
    with contextlib.suppress(FileNotFoundError, ArtifactInvalid):  # already gone: deleting is idempotent
        storage().delete(_name(uri))


def chunk_rows() -> int:
    return max(1, int(settings.SNAPSHOT_STREAM_CHUNK))
