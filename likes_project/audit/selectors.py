"""Reads of the audit chain (D82): its head, its checkpoints, the latest verification, and the walk that
verifies it. Nothing here writes; the outcome of a walk is recorded by `services.chain_verification_record`.

The walk is resumable (an ops job runs it in slices): `chain_walk_begin` reads the latest checkpoint and
then the head (in that order, so the checkpoint is never beyond the head read) and where to start;
`chain_walk_step` reads the rows in seq order, a page at a time (keyset on the unique seq index, so memory
stays bounded whatever the length of the log), and stops at the first broken link.

A redacted row (`redacted_at` set: a deleted account's mentions replaced by its pseudonym, `audit.redaction`)
no longer hashes to its row_hash, which it keeps, so its links and the checkpoints still hold. It is accepted
only if a later `audit.redact` record whose `at` is its `redacted_at`, and whose own hash holds, lists it with
its row_hash and the hash of its content as it is now; otherwise it is reported (`redaction_unrecorded`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from django.conf import settings
from django.utils import dateparse

from likes_project.audit import chain
from likes_project.audit.models import REDACT_ACTION, AuditChainCheckpoint, AuditChainVerification, AuditRecord
from likes_project.errors import InvalidInput

PAGE_ROWS = 2000
_ROW_FIELDS = ("seq", "at", "actor", "channel", "action", "target_type", "target_id", "params", "outcome", "job_id",
               "prev_hash", "row_hash", "redacted_at")


def signing_key() -> str:
    return getattr(settings, "AUDIT_CHAIN_SIGNING_KEY", "") or ""


def chain_head_get() -> tuple[int, str]:
    """(seq, row_hash) of the last chained row; (0, GENESIS) when there is none."""
    head = AuditRecord.objects.filter(seq__isnull=False).order_by("-seq").values_list("seq", "row_hash").first()
    return head if head is not None else (0, chain.GENESIS)


def checkpoint_latest_get() -> AuditChainCheckpoint | None:
    return AuditChainCheckpoint.objects.order_by("-seq", "-id").first()


def verification_latest_get() -> AuditChainVerification | None:
    return AuditChainVerification.objects.order_by("-id").first()


def checkpoint_view(cp: AuditChainCheckpoint | None) -> dict | None:
    if cp is None:
        return None
    return {"id": cp.pk, "seq": cp.seq, "rowHash": cp.row_hash, "at": chain.timestamp_text(cp.at),
            "signed": cp.signed, "keyId": cp.key_id}


def since_resolve(since: str | None) -> int:
    """The first seq a walk checks: `since` is a seq (a positive whole number) or an ISO-8601 time (a
    date, or a time without zone, is UTC), meaning the first row at or after it; none: seq 1."""
    if since is None or not str(since).strip():
        return 1
    text = str(since).strip()
    if text.isdigit():
        seq = int(text)
        if seq < 1:
            raise InvalidInput("--since: a seq starts at 1.", code="invalid_since")
        return seq
    try:
        at = dateparse.parse_datetime(text)
        if at is None:
            day = dateparse.parse_date(text)
            at = dt.datetime.combine(day, dt.time()) if day is not None else None
    except ValueError:
        at = None
    if at is None:
        raise InvalidInput(f"--since {text!r} is neither a seq nor an ISO-8601 time.", code="invalid_since")
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    first = (AuditRecord.objects.filter(seq__isnull=False, at__gte=at).order_by("at", "seq")
             .values_list("seq", flat=True).first())
    if first is None:
        raise InvalidInput(f"--since {text}: no audit row at or after that time.", code="since_beyond_head")
    return first


def _broken(seq: int | None, code: str, problem: str) -> dict:
    return {"seq": seq, "code": code, "problem": f"{code}: {problem}"}


def chain_walk_begin(*, since: str | None) -> dict:
    """The walk's starting state (JSON, an ops job's cursor). Refuses a `since` that is not a seq or a
    time, or that lies beyond the head (`invalid_since`, `since_beyond_head`)."""
    since = str(since).strip() or None if since is not None else None
    cp = checkpoint_latest_get()  # before the head: a checkpoint is never beyond the head read after it
    head_seq, _head_hash = chain_head_get()
    start = since_resolve(since)
    if since is not None and start > head_seq:
        raise InvalidInput(f"--since {since}: the chain ends at seq {head_seq}.", code="since_beyond_head")
    state = {"startSeq": start, "headSeq": head_seq, "nextSeq": start, "expectedPrev": chain.GENESIS,
             "checked": 0, "checkpoint": checkpoint_view(cp), "broken": None, "done": False}
    if start > 1:
        # Linkage is still checked from the row before the first one checked.
        before = AuditRecord.objects.filter(seq=start - 1).values_list("row_hash", flat=True).first()
        if before is None:
            state["broken"] = _broken(start - 1, "row_missing", f"no row with seq {start - 1}")
            state["done"] = True
        else:
            state["expectedPrev"] = before
    return state


def chain_walk_step(state: dict, *, deadline: float | None = None,
                    on_page: Callable[[dict], None] | None = None) -> dict:
    """Walk on from `state` until the chain is checked to its head, a link is broken, or `deadline`
    (time.monotonic()) has passed after a page; returns the state (`done` once there is a verdict)."""
    key = signing_key()
    while not state["done"]:
        rows = list(AuditRecord.objects.filter(seq__gte=state["nextSeq"], seq__lte=state["headSeq"])
                    .order_by("seq").values_list(*_ROW_FIELDS)[:PAGE_ROWS])
        if not rows:
            _walk_finish(state, key)
            break
        cps = {}
        for cp in AuditChainCheckpoint.objects.filter(seq__gte=rows[0][0], seq__lte=rows[-1][0]).order_by("id"):
            cps.setdefault(cp.seq, []).append(cp)
        redactions = _redactions_of(rows)
        for row in rows:
            state["broken"] = _row_check(state, dict(zip(_ROW_FIELDS, row, strict=True)), cps, key, redactions)
            if state["broken"] is not None:
                state["done"] = True
                break
        if on_page is not None:
            on_page(state)
        if deadline is not None and time.monotonic() >= deadline:
            break  # at least one page per call, so every slice makes progress
    return state


def _redactions_of(rows: list[tuple]) -> dict:
    """The `audit.redact` records that may list the page's redacted rows, by `at` (one indexed read; none when
    no row of the page is redacted)."""
    ats = {row[-1] for row in rows if row[-1] is not None}
    found: dict = {}
    if ats:
        for rec in AuditRecord.objects.filter(action=REDACT_ACTION, at__in=ats, seq__isnull=False).values_list(
                *_ROW_FIELDS):
            rec = dict(zip(_ROW_FIELDS, rec, strict=True))
            found.setdefault(rec["at"], []).append(rec)
    return found


def _redaction_recorded(row: dict, content_hash: str, records: list[dict]) -> bool:
    """A later `audit.redact` record, itself intact, lists the row with its row_hash and its content's hash. The
    record's link to the row before it is checked when the walk reaches it (or by the next walk, if it was
    appended after this walk read the head)."""
    seq = str(row["seq"])
    for rec in records:
        params = rec["params"] if isinstance(rec["params"], dict) else {}
        hashes, redacted = params.get("rowHashes"), params.get("redactedHashes")
        if (rec["seq"] > row["seq"] and rec["redacted_at"] is None and isinstance(hashes, dict)
                and isinstance(redacted, dict) and hashes.get(seq) == row["row_hash"]
                and redacted.get(seq) == content_hash
                and chain.row_hash_compute(**{f: rec[f] for f in chain.HASHED_FIELDS}) == rec["row_hash"]):
            return True
    return False


def _row_check(state: dict, row: dict, cps: dict, key: str, redactions: dict) -> dict | None:
    seq, expected = row["seq"], state["nextSeq"]
    if seq != expected:
        return _broken(expected, "row_missing", f"no row with seq {expected} (the next row is seq {seq})")
    content_hash = chain.row_hash_compute(**{f: row[f] for f in chain.HASHED_FIELDS})
    if row["redacted_at"] is not None:
        if not _redaction_recorded(row, content_hash, redactions.get(row["redacted_at"], [])):
            return _broken(seq, "redaction_unrecorded", "the row is marked redacted, but no later audit.redact "
                                                        "record lists it with its row_hash and its content as it is")
    elif content_hash != row["row_hash"]:
        return _broken(seq, "row_changed", "the row's content does not hash to its row_hash (it was changed)")
    if row["prev_hash"] != state["expectedPrev"]:
        return _broken(seq, "link_broken", f"prev_hash is not the row_hash of seq {seq - 1} (a row was changed, "
                                           f"replaced or removed before it)")
    for cp in cps.get(seq, ()):
        if cp.row_hash != row["row_hash"]:
            return _broken(seq, "checkpoint_mismatch", f"checkpoint {cp.pk} ({cp.at:%Y-%m-%d %H:%M:%S}) recorded "
                                                       f"row_hash {cp.row_hash[:12]}…, the row has "
                                                       f"{row['row_hash'][:12]}…")
        if key and cp.key_id == chain.key_id_of(key) and not _signature_valid(key, cp):
            return _broken(seq, "checkpoint_signature", f"checkpoint {cp.pk}'s signature does not verify with "
                                                        f"the configured key")
    state["expectedPrev"] = row["row_hash"]
    state["nextSeq"] = seq + 1
    state["checked"] += 1
    return None


def _signature_valid(key: str, cp) -> bool:
    return chain.checkpoint_signature_valid(key, at=cp.at, seq=cp.seq, row_hash=cp.row_hash, key_id=cp.key_id,
                                            signature=cp.signature)


def _walk_finish(state: dict, key: str) -> None:
    """Every row up to the head was checked: now what the rows cannot say themselves. Rows removed at the
    tail (the latest checkpoint names a seq beyond the head, or a row there that is no longer the same),
    a forged or foreign-key latest checkpoint when a key is configured, and rows outside the chain."""
    state["done"] = True
    head = state["headSeq"]
    if state["nextSeq"] <= head:
        state["broken"] = _broken(state["nextSeq"], "row_missing", f"rows {state['nextSeq']}..{head} are gone")
        return
    view = state["checkpoint"]
    if view is not None:
        cp = AuditChainCheckpoint.objects.get(pk=view["id"])
        if cp.seq > head:
            state["broken"] = _broken(head + 1, "tail_missing", f"the chain ends at seq {head}, but checkpoint "
                                                                f"{cp.pk} ({view['at']}) recorded seq {cp.seq}: "
                                                                f"rows {head + 1}..{cp.seq} were removed")
            return
        if cp.seq < state["startSeq"]:  # not on the walk (--since after it): compare that one row
            stored = AuditRecord.objects.filter(seq=cp.seq).values_list("row_hash", flat=True).first()
            if stored != cp.row_hash:
                state["broken"] = _broken(cp.seq, "checkpoint_mismatch", f"checkpoint {cp.pk} recorded a row_hash "
                                                                         f"the row at seq {cp.seq} does not have")
                return
        if key and (cp.key_id != chain.key_id_of(key) or not _signature_valid(key, cp)):
            why = "is not signed" if not cp.signed else (
                f"is signed with another key ({cp.key_id})" if cp.key_id != chain.key_id_of(key)
                else "has a signature that does not verify")
            state["broken"] = _broken(cp.seq, "checkpoint_signature", f"the latest checkpoint ({cp.pk}) {why}; with "
                                                                      f"AUDIT_CHAIN_SIGNING_KEY set it must verify")
            return
        view["signatureChecked"] = bool(key)
    outside = AuditRecord.objects.filter(seq__isnull=True).order_by("id").values_list("id", flat=True).first()
    if outside is not None:
        state["broken"] = _broken(None, "unchained_row", f"audit row id {outside} has no seq: it was inserted "
                                                         f"without audit_record")


def chain_report(state: dict) -> dict:
    """The verdict of a finished walk, as `audit_verify --json` prints it."""
    return {"status": "broken" if state["broken"] else "intact", "checked": state["checked"],
            "sinceSeq": state["startSeq"], "headSeq": state["headSeq"], "firstBroken": state["broken"],
            "checkpoint": state["checkpoint"], "signingKey": bool(signing_key())}
