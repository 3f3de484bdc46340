"""The exact export of one user's likes (spec LIST-5): "not one more, not one less", as of one
database snapshot, as JSON lines.

The UI cursor is a live traversal (LIST-4) and must not pose as an export; this reads the same facts
inside one REPEATABLE READ transaction on the user's shard, so every chunk sees the same snapshot
whatever commits meanwhile, and records that snapshot's time (`asOf`).

File format (JSON lines, UTF-8, one object per line, each with a "type"):
- line 1, "header": format name and version, userId, shard, asOf (the snapshot transaction's start,
  PostgreSQL `now()`), the PostgreSQL snapshot (`pg_current_snapshot()`), order and field list;
- then one "like" per LIKED relation, oldest first (updatedAt ASC, videoId ASC):
  videoId, likedAt (the relation's state change, UTC), relationVersion, videoStatus, listed;
- last line, "end": rowCount and unlistedCount, so a truncated copy is recognisable.

Every LIKED relation is exported, including videos that are taken down, deleted or unknown: the
export is the user's data, the list's visibility filter is not. Those rows carry `"listed": false`
and their `videoStatus` ("taken_down", "deleted", or "unknown" when no snapshot row exists). The
status comes from the control plane (`default`), which is a different database and so NOT part of
the snapshot: it is informational, read while the export runs. The set of rows, their likedAt and
relationVersion are exact as of `asOf`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO

from django.conf import settings
from django.db import connections, transaction

from likes_project.audit.services import Actor, audit_record
from likes_project.cursors import iso_utc
from likes_project.errors import InvalidInput
from relations import routing
from relations.models import AccountStatus, AccountStatusValue, LikeRelation, RelationState, VideoSnapshot

EXPORT_FORMAT = "likes-export"
EXPORT_FORMAT_VERSION = 1
EXPORT_PERMISSION = "relations.view_likerelation"
DEFAULT_CHUNK_ROWS = 1000
# Must be the transaction's first statement: PostgreSQL fixes the snapshot at the first query after it.
ISOLATION_SQL = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
FIELDS = ["videoId", "likedAt", "relationVersion", "videoStatus", "listed"]

_CHUNK_SQL = """
SELECT updated_at, video_id, state_changed_at, relation_version
  FROM {table}
 WHERE user_id = %s AND state = %s AND (updated_at, video_id) > (%s, %s)
 ORDER BY updated_at ASC, video_id ASC
 LIMIT %s
"""
_FIRST_CHUNK_SQL = """
SELECT updated_at, video_id, state_changed_at, relation_version
  FROM {table}
 WHERE user_id = %s AND state = %s
 ORDER BY updated_at ASC, video_id ASC
 LIMIT %s
"""


@dataclass(frozen=True)
class ExportResult:
    user_id: int
    alias: str
    as_of: datetime
    pg_snapshot: str
    row_count: int
    unlisted_count: int  # taken down, deleted or unknown videos (exported, flagged listed=false)


def _video_statuses(video_ids: list[str]) -> dict[str, str]:
    return dict(VideoSnapshot.objects.using("default").filter(video_id__in=video_ids)
                .values_list("video_id", "status"))


def _write(out: TextIO, obj: dict) -> None:
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")


def user_likes_export(*, user_id: int, out: TextIO, actor: Actor, destination: str = "",
                      progress: Callable[[int], None] | None = None, chunk_rows: int | None = None) -> ExportResult:
    """Write every LIKED relation of the user to `out` (format in the module docstring), exactly as of
    one snapshot, and audit it ("likes.export").

    Transaction: one durable REPEATABLE READ, READ ONLY transaction on the user's shard, read in
    keyset chunks of `chunk_rows` (each a bounded index range scan); `progress(rows_so_far)` is called
    after each chunk. The snapshot holds back vacuum on that shard for the export's duration. The
    audit record is written afterwards, in its own transaction on `default`; a failed export writes
    none. `out` is the caller's to make atomic (the command writes a temp file and renames it).
    Idempotency: read-only; running it twice writes two audit records.
    """
    alias = routing.alias_for_user(user_id)
    chunk = int(chunk_rows or getattr(settings, "LIKES_EXPORT_CHUNK_ROWS", DEFAULT_CHUNK_ROWS))
    table = LikeRelation._meta.db_table
    rows = unlisted = 0
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(ISOLATION_SQL)
        cursor.execute("SELECT now(), pg_current_snapshot()::text")
        as_of, pg_snapshot = cursor.fetchone()
        _write(out, {
            "type": "header", "format": EXPORT_FORMAT, "formatVersion": EXPORT_FORMAT_VERSION,
            "userId": user_id, "shard": alias, "asOf": iso_utc(as_of), "pgSnapshot": pg_snapshot,
            "order": "updatedAt ASC, videoId ASC", "fields": FIELDS,
            "note": "all LIKED relations as of asOf; listed=false marks videos the list hides "
                    "(videoStatus read from the control plane at export time, outside the snapshot)",
        })
        last = None
        while True:
            if last is None:
                cursor.execute(_FIRST_CHUNK_SQL.format(table=table), [user_id, RelationState.LIKED, chunk])
            else:
                cursor.execute(_CHUNK_SQL.format(table=table), [user_id, RelationState.LIKED, *last, chunk])
            batch = cursor.fetchall()
            if not batch:
                break
            statuses = _video_statuses([r[1] for r in batch])
            for _updated_at, video_id, state_changed_at, relation_version in batch:
                status = statuses.get(video_id, "unknown")
                listed = status == "active"
                unlisted += not listed
                _write(out, {"type": "like", "videoId": video_id, "likedAt": iso_utc(state_changed_at),
                             "relationVersion": relation_version, "videoStatus": status, "listed": listed})
            rows += len(batch)
            last = (batch[-1][0], batch[-1][1])
            if progress is not None:
                progress(rows)
            if len(batch) < chunk:
                break
        _write(out, {"type": "end", "rowCount": rows, "unlistedCount": unlisted})
    out.flush()
    result = ExportResult(user_id=user_id, alias=alias, as_of=as_of, pg_snapshot=pg_snapshot, row_count=rows,
                          unlisted_count=unlisted)
    with transaction.atomic(using="default", durable=True):
        audit_record(actor=actor, action="likes.export", target_type="user", target_id=str(user_id), params={
            "asOf": iso_utc(as_of), "shard": alias, "pgSnapshot": pg_snapshot, "rowCount": rows,
            "unlistedCount": unlisted, "destination": destination[:500],
        })
    return result


# --- a video's likers (OPS-9, issue 14 §6) ---------------------------------------------------------------

LIKERS_EXPORT_FORMAT = "likers-export"
LIKERS_EXPORT_PERMISSION = "relations.export_video_likers"
LIKERS_FIELDS = ["userId", "likedAt", "relationVersion", "shard"]
# The privacy rules an export applied, pinned in its header (REV-9). Version 1 (docs/privacy.md): a deleted
# account is left out (PRIV-4: it is erased, and its likes are being withdrawn); a private or banned liker is
# listed, the export being an audited operator's view with a stated purpose, never the public list.
PRIVACY_RULES_VERSION = 1


def _deleted(user_ids: list[int]) -> set[int]:
    return set(AccountStatus.objects.filter(user_id__in=user_ids, status=AccountStatusValue.DELETED)
               .values_list("user_id", flat=True)) if user_ids else set()

_LIKERS_SQL = """
SELECT user_id, state_changed_at, relation_version
  FROM {table}
 WHERE video_id = %s AND state = %s AND user_id > %s
 ORDER BY user_id ASC
 LIMIT %s
"""


@dataclass(frozen=True)
class LikersExportResult:
    video_id: str
    row_count: int
    shards: dict[str, str]  # shard -> asOf (ISO)


def video_likers_export(*, video_id: str, purpose: str, out: TextIO, actor: Actor, destination: str = "",
                        progress: Callable[[int], None] | None = None,
                        chunk_rows: int | None = None) -> LikersExportResult:
    """Write every account that likes `video_id` to `out` as JSON lines, for the stated `purpose`, and
    audit it ("likers.export", with the purpose). Liker identities are not public because a count is
    (PRIV-1): an export needs LIKERS_EXPORT_PERMISSION, which no role holds by default, and a purpose.

    File: a "header" line (format, videoId, purpose, fields, privacyRulesVersion), one "liker" line per LIKED
    relation of an account that is not deleted
    (userId, likedAt, relationVersion, shard; by shard, then user id), a "shard" line after each shard
    with the asOf of its snapshot, and an "end" line with rowCount.
    Transaction: the relations of a video are spread over every relation shard (they are placed by
    user); each shard is read in one REPEATABLE READ, READ ONLY transaction, in keyset chunks over
    `relation_video_idx`, so each shard's part is exact as of its own asOf (there is no cross-shard
    snapshot). The audit record is written afterwards on `default`; a failed export writes none.
    """
    purpose = purpose.strip()
    if not purpose:
        raise InvalidInput("State the purpose of the export.", code="purpose_required")
    chunk = int(chunk_rows or getattr(settings, "LIKES_EXPORT_CHUNK_ROWS", DEFAULT_CHUNK_ROWS))
    table = LikeRelation._meta.db_table
    _write(out, {"type": "header", "format": LIKERS_EXPORT_FORMAT, "formatVersion": 1, "videoId": video_id,
                 "purpose": purpose, "order": "shard, userId ASC", "fields": LIKERS_FIELDS,
                 "privacyRulesVersion": PRIVACY_RULES_VERSION})
    rows, shards = 0, {}
    for alias in settings.RELATION_SHARD_ALIASES:
        with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
            cursor.execute(ISOLATION_SQL)
            cursor.execute("SELECT now()")
            as_of = iso_utc(cursor.fetchone()[0])
            # A slot move leaves a second copy of its users' rows (INCOMING on the target before the switch,
            # MOVED_OUT on the source after it): a row counts only on the shard the contract puts its user on.
            owned = routing.owned_filter(alias)
            last = 0
            while True:
                cursor.execute(_LIKERS_SQL.format(table=table), [video_id, RelationState.LIKED, last, chunk])
                batch = cursor.fetchall()
                gone = _deleted([row[0] for row in batch])
                kept = [row for row in batch if owned.owns(row[0]) and row[0] not in gone]
                for user_id, liked_at, version in kept:
                    _write(out, {"type": "liker", "userId": user_id, "likedAt": iso_utc(liked_at),
                                 "relationVersion": version, "shard": alias})
                rows += len(kept)
                if kept and progress is not None:
                    progress(rows)
                if len(batch) < chunk:
                    break
                last = batch[-1][0]
        shards[alias] = as_of
        _write(out, {"type": "shard", "shard": alias, "asOf": as_of})
    _write(out, {"type": "end", "rowCount": rows})
    out.flush()
    with transaction.atomic(using="default", durable=True):
        audit_record(actor=actor, action="likers.export", target_type="video", target_id=video_id, params={
            "purpose": purpose[:500], "rowCount": rows, "shards": shards, "destination": destination[:500]})
    return LikersExportResult(video_id=video_id, row_count=rows, shards=shards)
