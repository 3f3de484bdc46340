"""Stable hash functions named by the frozen contracts (relation shards, stream partitions, bucket
spaces). A name, once used, never changes what it computes; golden-vector tests pin every one."""

from __future__ import annotations

import hashlib

from django.db import models
from django.db.models import Q

HASH_SHA256_BE64 = "sha256-be64"


def stable_hash(algorithm: str, seed: str, key: bytes) -> int:
    """Unsigned 64-bit hash of `key` under `seed`."""
    if algorithm == HASH_SHA256_BE64:
        digest = hashlib.sha256(seed.encode("utf-8") + b"\x1f" + key).digest()
        return int.from_bytes(digest[:8], "big")
    raise ValueError(f"unknown hash algorithm {algorithm!r}")


def length_prefixed_utf8(*parts: str) -> bytes:
    """Unambiguous concatenation: 4-byte big-endian length + UTF-8 bytes, for each part (BKT-2)."""
    out = bytearray()
    for part in parts:
        data = part.encode("utf-8")
        out += len(data).to_bytes(4, "big") + data
    return bytes(out)


class HashContract(models.Model):
    """The identity of a frozen hashing contract stored as a row (architecture §7): which algorithm,
    seed and key encoding a version computes with. A version is never edited; a change is a new one."""

    version = models.PositiveIntegerField(primary_key=True)
    hash_algorithm = models.CharField(max_length=32)
    hash_seed = models.CharField(max_length=64)
    key_encoding = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True


def one_active(name: str) -> models.UniqueConstraint:
    """A contract table's "at most one row has is_active" (the version new writes use)."""
    return models.UniqueConstraint(fields=["is_active"], condition=Q(is_active=True), name=name)


class HashingReader:
    """A read-only file wrapper that hashes (SHA-256) and counts what is read through it: a stored artifact's
    digest and size, taken while it is streamed (recovery snapshots, feature export files)."""

    def __init__(self, fh) -> None:
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        block = self.fh.read(n)
        self.sha.update(block)
        self.size += len(block)
        return block

    def readable(self) -> bool:
        return True
