"""The audit chain's canonical form (D82): how a row is hashed and a checkpoint signed. Pure functions,
shared by `audit_record` (which hashes a row before inserting it), the data migration that chained the
rows written before the chain existed, and the verifier (which hashes every row again).

row_hash = SHA-256 (hex) over the canonical JSON of {seq, at, actor, channel, action, target_type,
target_id, params, outcome, job_id, prev_hash}: keys sorted, compact separators, ASCII escapes, `at` as
an ISO-8601 UTC timestamp with microseconds. The first row's prev_hash is GENESIS (64 zeros).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import math

GENESIS = "0" * 64
HASHED_FIELDS = ("seq", "at", "actor", "channel", "action", "target_type", "target_id", "params", "outcome",
                 "job_id", "prev_hash")
# One transaction-level advisory lock on `default` serialises the appenders (audit_record); a constant of
# its own, apart from every other advisory key of the project ("audit" in ASCII, with a tag).
CHAIN_LOCK_KEY = 0x6175646974_0001


def canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def timestamp_text(at: dt.datetime) -> str:
    if at.tzinfo is None:
        raise ValueError("audit timestamps are timezone-aware")
    return at.astimezone(dt.UTC).isoformat(timespec="microseconds")


def params_canonical(params) -> dict | list:
    """`params` as PostgreSQL's jsonb gives it back, so the hash taken before the insert is the hash of
    what the row holds: JSON types only (tuples become lists, keys strings), and numbers as jsonb's
    `numeric` keeps them (an integral float that Python writes with an exponent, 1e+16 and above, comes
    back an integer; -0.0 comes back 0.0). NaN and infinities are refused, as jsonb refuses them."""
    return _numbers(json.loads(json.dumps(params, allow_nan=False)))


def _numbers(value):
    if isinstance(value, float):
        if not math.isfinite(value):  # pragma: no cover - json.dumps(allow_nan=False) refused it already
            raise ValueError("audit params must be finite numbers")
        if value == 0.0:
            return 0.0
        if value.is_integer() and abs(value) >= 1e16:
            return int(value)
        return value
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    return value


def row_hash_compute(*, seq: int, at: dt.datetime, actor: str, channel: str, action: str, target_type: str,
                     target_id: str, params, outcome: str, job_id: int | None, prev_hash: str) -> str:
    payload = {"seq": seq, "at": timestamp_text(at), "actor": actor, "channel": channel, "action": action,
               "target_type": target_type, "target_id": target_id, "params": params, "outcome": outcome,
               "job_id": job_id, "prev_hash": prev_hash}
    return hashlib.sha256(canonical_json(payload).encode("ascii")).hexdigest()


# --- checkpoint signatures ---------------------------------------------------------------------------


def key_id_of(key: str) -> str:
    """A short public name of a signing key (an HMAC of a fixed label: it reveals nothing of the key)."""
    return hmac.new(key.encode(), b"likes-audit-chain-key-id", hashlib.sha256).hexdigest()[:16]


def checkpoint_message(*, at: dt.datetime, seq: int, row_hash: str, key_id: str) -> bytes:
    return canonical_json({"at": timestamp_text(at), "seq": seq, "row_hash": row_hash,
                           "key_id": key_id}).encode("ascii")


def checkpoint_sign(key: str, *, at: dt.datetime, seq: int, row_hash: str) -> tuple[str, str]:
    """(signature, key_id) of a checkpoint under `key`."""
    key_id = key_id_of(key)
    message = checkpoint_message(at=at, seq=seq, row_hash=row_hash, key_id=key_id)
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest(), key_id


def checkpoint_signature_valid(key: str, *, at: dt.datetime, seq: int, row_hash: str, key_id: str,
                               signature: str) -> bool:
    if key_id != key_id_of(key):
        return False
    message = checkpoint_message(at=at, seq=seq, row_hash=row_hash, key_id=key_id)
    return hmac.compare_digest(hmac.new(key.encode(), message, hashlib.sha256).hexdigest(), signature or "")
