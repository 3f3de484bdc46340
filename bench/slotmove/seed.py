"""Seeded relations of the slot-move benchmark, written in bulk straight into the source shard: `scale` LIKED
relations of users in the slots that move (`per_user` each, one command row each, as a like leaves them), and
`rest_share` as many in the source's other slots. No outbox rows (published long ago) and no projections: the
move copies relation and command rows only."""

from __future__ import annotations

import time

from bench.dataset import relations_insert
from bench.slotmove import SEED_USER_BASE, SEED_VIDEO_PREFIX, SOURCE


def _users(cursor, contract, slots: list[int], n: int, start: int) -> list[int]:
    """`n` user ids from `start` up whose contract slot is in `slots` (the slot function in SQL)."""
    span = max(n * contract.logical_slots // max(len(slots), 1) * 2, 1000)
    cursor.execute("SELECT i FROM generate_series(%s::bigint, %s::bigint) AS i "
                   "WHERE likes_slot_of(i, %s, %s) = ANY(%s) ORDER BY i LIMIT %s",
                   [start, start + span, contract.hash_seed, contract.logical_slots, slots, n])
    return [r[0] for r in cursor.fetchall()]


def _insert(cursor, users: list[int], per_user: int) -> int:
    from relations.models import LikeCommand

    if not users:
        return 0
    pairs = ("SELECT u, %s || lpad(((u %% 1000) + k)::text, 5, '0') AS v, k FROM unnest(%s::bigint[]) AS u "
             "CROSS JOIN generate_series(0, %s - 1) AS k")
    params = [SEED_VIDEO_PREFIX, users, per_user]
    relations_insert(cursor, f"SELECT u, v, 'LIKED', 1, 'seed-' || u || '-' || k, now() - interval '30 days' "
                             f"FROM ({pairs}) AS p", params)
    cursor.execute(f"INSERT INTO {LikeCommand._meta.db_table} (user_id, operation_id, video_id, desired_state, "
                   f"result_state, result_version, changed, base_version, device_id, client_sequence, created_at) "
                   f"SELECT u, 'seed-' || u || '-' || k, v, 'LIKED', 'LIKED', 1, true, NULL, 'bench', NULL, "
                   f"now() - interval '30 days' FROM ({pairs}) AS p", params)
    return len(users) * per_user


def seed(*, contract, moving: list[int], scale: int, per_user: int, rest_share: float) -> dict:
    from django.db import connections, transaction

    from relations.models import LikeCommand, LikeRelation

    t0 = time.monotonic()
    others = [s for s in range(contract.logical_slots) if contract.slot_aliases[s] == SOURCE and s not in moving]
    n_moving = max(scale // per_user, 1)
    n_rest = int(n_moving * rest_share)
    with transaction.atomic(using=SOURCE), connections[SOURCE].cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = 0")  # a bulk load, not the product's statements
        users = _users(cursor, contract, moving, n_moving, SEED_USER_BASE)
        rest = _users(cursor, contract, others, n_rest, SEED_USER_BASE) if n_rest and others else []
        # one insert over both sets, in user id order: the moving rows are spread over the whole table, as in life
        _insert(cursor, sorted(users + rest), per_user)
    with connections[SOURCE].cursor() as cursor:
        cursor.execute("SET statement_timeout = 0")
        for model in (LikeRelation, LikeCommand):
            cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")
    return {"moving_users": len(users), "moving_relations": len(users) * per_user, "rest_users": len(rest),
            "rest_relations": len(rest) * per_user, "per_user": per_user, "seconds": round(time.monotonic() - t0, 1)}
