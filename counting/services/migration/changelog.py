"""The partition-local change log a bucket migration copies and replays by (MIG-2 COPYING, CATCHING_UP;
issue 13 §3, D69).

Every INSERT or UPDATE of a projection or bucket row takes the next value of the partition's
`count_change_seq` (a row trigger, so every writer is covered, in the writer's own transaction). A row's
`change_seq` is the position of its last change; "the rows of these buckets changed after position a" is
one index range per bucket (`(generation, virtual_bucket, change_seq)`).

Sequence values are handed out before their transactions commit, so "the largest value read" is not a
safe horizon on its own. `horizon` makes it one: it locks the buckets' route fence rows (every writer of a
bucket holds its fence row FOR SHARE from before it takes a value until it commits, and fence locks are
taken in bucket order on both sides), so once it holds them no writer of those buckets is in flight, and
every value at or below the sequence's position then is committed or was never used for them.

The target is written by overwrite, never by sum: a projection row where the source's version is higher,
a bucket row where its bucket version is not lower (issue 13 §3).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db import connections, transaction

from counting.models import CountRouteFence, LikeCountProjection, VideoLikeCountVbucket
from counting.models.projection import CHANGE_SEQ


@dataclass(frozen=True)
class Table:
    kind: str
    model: type
    key: tuple[str, ...]
    columns: tuple[str, ...]  # copied as they are (after the key)
    types: tuple[str, ...]  # postgres array types of key + columns, in order
    guard: str  # the ON CONFLICT ... WHERE that makes the overwrite idempotent

    @property
    def table(self) -> str:
        return self.model._meta.db_table

    @property
    def all_columns(self) -> tuple[str, ...]:
        return (*self.key, *self.columns)


PROJECTION = Table("projection", LikeCountProjection, ("user_id", "video_id"),
                   ("projected_state", "projected_version", "bucket_space_version", "virtual_bucket", "updated_at"),
                   ("bigint", "text", "text", "bigint", "int", "int", "timestamptz"),
                   "t.projected_version < EXCLUDED.projected_version")
VBUCKETS = Table("vbuckets", VideoLikeCountVbucket, ("video_id", "virtual_bucket"),
                 ("bucket_space_version", "active_count", "bucket_version", "frozen", "updated_at"),
                 ("text", "int", "int", "bigint", "bigint", "boolean", "timestamptz"),
                 "t.bucket_version <= EXCLUDED.bucket_version")
TABLES = (PROJECTION, VBUCKETS)


def horizon(alias: str, *, space_version: int, buckets: list[int], state: str | None = None) -> int:
    """The change-log position on `alias` below which every change of `buckets` is committed (see the
    module). With `state`, the fence rows are also set to it in the same transaction (DRAINING at the
    cutover: the position read is then the final watermark H)."""
    fence = CountRouteFence._meta.db_table
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT virtual_bucket FROM {fence} WHERE bucket_space_version = %s AND "
                       "virtual_bucket = ANY(%s) ORDER BY virtual_bucket FOR NO KEY UPDATE", [space_version, buckets])
        if state is not None:
            cursor.execute(f"UPDATE {fence} SET state = %s WHERE bucket_space_version = %s AND "
                           "virtual_bucket = ANY(%s)", [state, space_version, buckets])
        return _position(cursor)


def position(alias: str) -> int:
    """The sequence's position now (no horizon: for the target, which only the migration writes)."""
    with connections[alias].cursor() as cursor:
        return _position(cursor)


def _position(cursor) -> int:
    cursor.execute(f"SELECT last_value, is_called FROM {CHANGE_SEQ}")
    last, called = cursor.fetchone()
    return int(last) if called else 0


def rows_after(alias: str, table: Table, *, generation: int, buckets: list[int], after: tuple[int, int],
               limit: int) -> list[tuple]:
    """The rows of `buckets` after the keyset `after` = (bucket, change seq), in (bucket, change) order:
    (*key, *columns, virtual_bucket, change_seq). One index range scan across the buckets."""
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(table.all_columns)}, virtual_bucket, change_seq FROM {table.table} WHERE "
                       "generation = %s AND (virtual_bucket, change_seq) > (%s, %s) AND virtual_bucket <= %s "
                       "AND virtual_bucket = ANY(%s) ORDER BY virtual_bucket, change_seq LIMIT %s",
                       # the upper bound ends the index range at the last bucket: the set is only a filter
                       [generation, after[0], after[1], max(buckets), buckets, limit])
        return cursor.fetchall()


def changes_between(alias: str, table: Table, *, generation: int, buckets: list[int], after: int, through: int,
                    limit: int) -> Iterator[list[tuple]]:
    """The rows of `buckets` whose last change lies in (after, through], in chunks of `limit`."""
    low = after
    while True:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(table.all_columns)}, change_seq FROM {table.table} WHERE "
                           "generation = %s AND virtual_bucket = ANY(%s) AND change_seq > %s AND change_seq <= %s "
                           "ORDER BY change_seq LIMIT %s", [generation, buckets, low, through, limit])
            rows = cursor.fetchall()
        if not rows:
            return
        yield rows
        if len(rows) < limit:
            return
        low = rows[-1][-1]


def rows_apply(alias: str, table: Table, *, generation: int, rows: list[tuple]) -> int:
    """Overwrite the target's rows with `rows` (as `rows_after` returns them) by version: idempotent, a
    replayed chunk changes nothing. One statement. Returns the rows written."""
    if not rows:
        return 0
    cols = table.all_columns
    arrays = [[r[i] for r in rows] for i in range(len(cols))]
    unnest = ", ".join(f"%s::{t}[]" for t in table.types)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in table.columns)
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(f"INSERT INTO {table.table} AS t (generation, {', '.join(cols)}) SELECT %s, * FROM "
                       f"unnest({unnest}) ON CONFLICT (generation, {', '.join(table.key)}) DO UPDATE SET {updates} "
                       f"WHERE {table.guard}", [generation, *arrays])
        return cursor.rowcount


def rows_delete(alias: str, *, generation: int, buckets: list[int], batch: int = 20000,
                on_batch=None) -> int:
    """Delete the projection and bucket rows of `buckets` on `alias` (a target cleared before a copy, an
    aborted target, a retired source), in batches. Returns rows deleted."""
    total = 0
    for table in TABLES:
        while True:
            with connections[alias].cursor() as cursor:
                cursor.execute(f"DELETE FROM {table.table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table.table} "
                               "WHERE generation = %s AND virtual_bucket = ANY(%s) LIMIT %s))",
                               [generation, buckets, batch])
                n = cursor.rowcount
            total += n
            if on_batch is not None:
                on_batch()
            if n < batch:
                break
    return total


def rows_count(alias: str, *, generation: int, buckets: list[int]) -> int:
    n = 0
    with connections[alias].cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table.table} WHERE generation = %s AND virtual_bucket = ANY(%s)",
                           [generation, buckets])
            n += cursor.fetchone()[0]
    return n


def bucket_rows(alias: str, table: Table, *, generation: int, buckets: list[int]) -> dict[tuple, tuple]:
    """key -> columns of the rows of `buckets` (VERIFY)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(table.all_columns)} FROM {table.table} WHERE generation = %s AND "
                       "virtual_bucket = ANY(%s)", [generation, buckets])
        n = len(table.key)
        return {tuple(r[:n]): tuple(r[n:]) for r in cursor.fetchall()}


def identity_problems(alias: str, *, generation: int, buckets: list[int], limit: int = 20) -> list[dict]:
    """REC-1 on `alias` for `buckets`, in one snapshot: a bucket whose count is not its LIKED rows."""
    p_t, b_t = PROJECTION.table, VBUCKETS.table
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cursor.execute("SET LOCAL statement_timeout = 0")  # an aggregate over every moved bucket
        cursor.execute(
            f"WITH p AS (SELECT video_id, virtual_bucket, count(*) AS n FROM {p_t} WHERE generation = %s AND "
            f"virtual_bucket = ANY(%s) AND projected_state = 'LIKED' GROUP BY 1, 2), b AS (SELECT video_id, "
            f"virtual_bucket, active_count FROM {b_t} WHERE generation = %s AND virtual_bucket = ANY(%s)) "
            "SELECT COALESCE(p.video_id, b.video_id), COALESCE(p.virtual_bucket, b.virtual_bucket), COALESCE(p.n, 0), "
            "COALESCE(b.active_count, 0) FROM p FULL JOIN b USING (video_id, virtual_bucket) "
            "WHERE COALESCE(p.n, 0) <> COALESCE(b.active_count, 0) LIMIT %s",
            [generation, buckets, generation, buckets, limit])
        return [{"partition": alias, "videoId": v, "virtualBucket": vb, "liked": n, "bucket": c}
                for v, vb, n, c in cursor.fetchall()]
