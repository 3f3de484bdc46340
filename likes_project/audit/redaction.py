"""A deleted account's mentions in the audit log, replaced by its pseudonym (issue 31 §4, PRIV-4): the eraser `audit`.

Audit records are never deleted. They keep the pseudonym (`likes_project.erasure.user_pseudonym`), not the user id
or the username, of a deleted account. The log is a hash chain (D82), so this is a redaction on record, never a
silent rewrite of history:

- A redacted record keeps its place in the chain: `seq`, `prev_hash` and `row_hash` are unchanged (so the next
  row's link and every checkpoint still hold), while `actor`, `target_id` and `params` are rewritten with each
  mention replaced by the pseudonym, and `redacted_at` is set. The append-only trigger (sql/audit_append_only.v2.sql)
  lets exactly this UPDATE through and still refuses every other UPDATE and every DELETE.
- The redaction appends one `audit.redact` record per batch of up to BATCH rows (target_type `user_pseudonym`,
  target_id the pseudonym; never the user id or username) whose params list each redacted row: `seqs`, `rowHashes`
  (seq -> the row's original row_hash, as stored) and `redactedHashes` (seq -> the hash of the redacted content in
  the chain's canonical form). Each row's `redacted_at` is that record's `at`. A row naming two erased accounts is
  redacted twice: its `redacted_at` moves forward to the second record's `at`, which lists it again.
- The verifier (`selectors.chain_walk_step`) does not expect a redacted row to hash to its row_hash; it must be
  listed, with its row_hash and the hash of its content as it is now, in a later `audit.redact` record with that
  `at` whose own hash holds (the walk checks its link when it reaches it). A row marked redacted that no such
  record lists, or whose content changed after the redaction, is reported (`redaction_unrecorded`).

What names the user (MENTIONS): a record about the user (`target_type` "user", `target_id` the id); the string
`user:<id>` anywhere (an ops job's target, the `actor` of an end user acting through the API, `api_actor`); and in
`params`, at any depth, a value equal to the id (an integer or its decimal string) or to one of the account's
usernames under a key that names a user (USER_KEYS: "username", "user_id", "authorId", ...; under the plural keys,
"users", "userIds", only the items of a list: "users": 3 is a count). The usernames are the auth user's (the row
stays, deactivated) and every `username` the log recorded for that user id (an earlier name). Not rewritten:
operators' names as `actor` (operators are not the erased end users), free text (a `reason`), a file name built
from a username, and rows outside the chain (no seq: tampering evidence, reported by the verifier as they are).

Cost: one scan of the whole log per erased account (the jsonpath filter over `params` cannot use an index), in
SCAN_ROWS slices of the seq index so no statement nears the statement timeout, and before the chain lock is taken;
under the lock only the rows appended since the scan are searched and the candidates re-read by id, so audited
actions wait for the rewrite of the account's own rows, not for the scan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from likes_project.audit import chain
from likes_project.audit.models import REDACT_ACTION, AuditRecord
from likes_project.audit.services import audit_record, system_actor
from likes_project.erasure import user_pseudonym

REDACT_ACTOR = "account-erasure"
BATCH = 500  # rows per audit.redact record (its params carry two hashes per row)
SCAN_ROWS = 50_000  # rows per scanning statement, well inside the statement timeout
SINGLE_USER_KEYS = frozenset({"user", "user_id", "userId", "username", "author_id", "authorId"})
LIST_USER_KEYS = frozenset({"users", "user_ids", "userIds", "usernames"})
_TABLE = AuditRecord._meta.db_table
_FIELDS = ("id", "seq", "at", "actor", "channel", "action", "target_type", "target_id", "params", "outcome", "job_id",
           "prev_hash", "row_hash", "redacted_at")


@dataclass(frozen=True)
class Mentions:
    """How one account is named in the log, and what replaces it."""

    user_id: int
    usernames: frozenset[str]
    pseudonym: str

    @property
    def tag(self) -> str:
        return f"user:{self.user_id}"

    def names_user(self, value) -> bool:
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return value == self.user_id
        return isinstance(value, str) and (value == str(self.user_id) or value in self.usernames)


def record_redacted(row: dict, m: Mentions) -> dict | None:
    """The record's `actor`, `target_id` and `params` with every mention of the account replaced by its pseudonym;
    None when it names the account nowhere. Pure."""
    tag = f"user:{m.pseudonym}"
    actor = tag if row["actor"] == m.tag else row["actor"]
    target_id = row["target_id"]
    if row["target_type"] == "user" and target_id == str(m.user_id):
        target_id = m.pseudonym
    elif target_id == m.tag:
        target_id = tag
    params = _params_redacted(row["params"], None, False, m)
    if (actor, target_id, params) == (row["actor"], row["target_id"], row["params"]):
        return None
    return {"actor": actor, "target_id": target_id, "params": params}


def _params_redacted(value, key: str | None, in_list: bool, m: Mentions):
    if isinstance(value, dict):
        return {k: _params_redacted(v, k, False, m) for k, v in value.items()}
    if isinstance(value, list):
        return [_params_redacted(v, key, True, m) for v in value]
    if value == m.tag:
        return f"user:{m.pseudonym}"
    if (key in SINGLE_USER_KEYS or (in_list and key in LIST_USER_KEYS)) and m.names_user(value):
        return m.pseudonym
    return value


def audit_redact_user(user_id: int) -> dict:
    """Replace a deleted account's user id and usernames in the audit log by its pseudonym, on record (the eraser
    `audit`, run by the account deletion after its withdrawal). Returns {"redacted": rows rewritten}.

    Transaction: one durable transaction on `default`. The scan for candidates runs first, without the chain lock;
    then the lock (CHAIN_LOCK_KEY, as `audit_record` takes it) is held to the commit, so no row is appended or
    redacted meanwhile: the rows appended since the scan are searched too, every candidate is re-read, and the
    `audit.redact` records are appended after the rows they list.
    Idempotency: a second run finds no mention left and writes nothing ({"redacted": 0})."""
    user_id = int(user_id)
    with transaction.atomic(using="default", durable=True):
        conn = transaction.get_connection("default")
        m = Mentions(user_id, _usernames(user_id), user_pseudonym(user_id))
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT coalesce(max(seq), 0) FROM {_TABLE}")
            scanned_to = cursor.fetchone()[0]
            ids: set[int] = set()
            for low in range(0, scanned_to, SCAN_ROWS):  # seqs are gap-free: each slice is one index range
                ids |= _candidates(cursor, m, after_seq=low, up_to=min(low + SCAN_ROWS, scanned_to))
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [chain.CHAIN_LOCK_KEY])
            ids |= _candidates(cursor, m, after_seq=scanned_to)
        rows = list(AuditRecord.objects.filter(id__in=ids, seq__isnull=False).order_by("seq").values(*_FIELDS))
        changes = [(row, new) for row in rows if (new := record_redacted(row, m)) is not None]
        for start in range(0, len(changes), BATCH):
            _batch_redact(changes[start:start + BATCH], m)
    return {"redacted": len(changes)}


def _usernames(user_id: int) -> frozenset[str]:
    """The account's username, and every username the log recorded for it (a renamed account's earlier ones)."""
    names = set(get_user_model().objects.filter(pk=user_id).values_list("username", flat=True))
    recorded = (AuditRecord.objects.filter(target_type="user", target_id=str(user_id), params__has_key="username")
                .values_list("params__username", flat=True))
    names |= {n for n in recorded if isinstance(n, str)}
    return frozenset(n for n in names if n)


def _candidates(cursor, m: Mentions, *, after_seq: int, up_to: int | None = None) -> set[int]:
    """Ids of chained rows in (after_seq, up_to] that may name the account (a superset: `record_redacted`
    decides)."""
    values = {"id": m.user_id, "text": str(m.user_id), "tag": m.tag,
              **{f"n{i}": name for i, name in enumerate(sorted(m.usernames))}}
    path = "$.** ? (" + " || ".join(f"@ == ${name}" for name in values) + ")"
    upper = "" if up_to is None else f" AND seq <= {int(up_to)}"
    cursor.execute(f"SELECT id FROM {_TABLE} WHERE seq > %s{upper} AND (target_id IN (%s, %s) OR actor = %s "
                   f"OR jsonb_path_exists(params, %s::jsonpath, %s::jsonb))",
                   [after_seq, str(m.user_id), m.tag, m.tag, path, json.dumps(values)])
    return {row[0] for row in cursor.fetchall()}


def _batch_redact(batch, m: Mentions) -> None:
    """One `audit.redact` record listing the batch, then the rows rewritten with `redacted_at` = its `at`."""
    hashes, redacted, updates = {}, {}, []
    for row, new in batch:
        params = chain.params_canonical(new["params"])
        content = {**{f: row[f] for f in chain.HASHED_FIELDS}, **new, "params": params}
        hashes[str(row["seq"])] = row["row_hash"]
        redacted[str(row["seq"])] = chain.row_hash_compute(**content)
        updates.append({"id": row["id"], "actor": new["actor"], "target_id": new["target_id"], "params": params})
    record = audit_record(actor=system_actor(REDACT_ACTOR), action=REDACT_ACTION, target_type="user_pseudonym",
                          target_id=m.pseudonym, params={"seqs": [row["seq"] for row, _new in batch],
                                                         "rowHashes": hashes, "redactedHashes": redacted})
    with transaction.get_connection("default").cursor() as cursor:
        cursor.execute(f"UPDATE {_TABLE} AS r SET actor = v.actor, target_id = v.target_id, params = v.params, "
                       f"redacted_at = %s FROM jsonb_to_recordset(%s::jsonb) AS v(id bigint, actor text, "
                       f"target_id text, params jsonb) WHERE r.id = v.id",
                       [record.at, json.dumps(updates)])
        if cursor.rowcount != len(updates):  # the lock is held: nothing else can have changed them
            raise RuntimeError(f"audit redaction rewrote {cursor.rowcount} of {len(updates)} rows")
