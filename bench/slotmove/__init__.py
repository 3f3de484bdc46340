"""The parts of the relation slot-move benchmark (bench/slotmove_bench.py, run by ./bench/slotmove.sh): `seed`
(relation and command rows straight into the source shard), `load` (spawned command clients on the service
layer, every command timed) and `report`."""

from __future__ import annotations

from bench.common import make_log

log = make_log("slotmove")

DB_NAME = "likes_bench_slot"
SOURCE, TARGET = "rel_00", "rel_02"
CONTRACT_SHARDS = ("rel_00", "rel_01")  # contract v1 spreads over these; rel_02 starts empty
SEED_USER_BASE = 3_000_000_000  # seeded users' ids: far above any Django user id of the run
SEED_VIDEO_PREFIX = "bench-slot-v"
LOAD_VIDEO_PREFIX = "bench-slot-load-"
OPERATOR = "bench-slot-operator"  # plans the moves
APPROVER = "bench-slot-approver"  # approves them (another person)


def check_own_databases() -> None:
    """Refuse anything but this benchmark's own databases: three relation shards, the contract over two."""
    from django.conf import settings

    for alias, cfg in settings.DATABASES.items():
        name = str(cfg["NAME"])
        if not (name == DB_NAME or name.startswith(DB_NAME + "_")):
            raise SystemExit(f"[slotmove] refusing: alias {alias} uses database {name!r}, not {DB_NAME}*; "
                             "use ./bench/slotmove.sh")
    if list(settings.RELATION_SHARD_ALIASES) != [*CONTRACT_SHARDS, TARGET] or \
            list(settings.RELATION_CONTRACT_SHARDS) != list(CONTRACT_SHARDS):
        raise SystemExit("[slotmove] refusing: needs RELATION_SHARDS=3 and RELATION_CONTRACT_SHARDS="
                         f"{','.join(CONTRACT_SHARDS)}")
