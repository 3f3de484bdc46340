"""The parts of the virtual-bucket migration benchmark (bench/migration_bench.py, run by ./bench/migration.sh):
`seed` (projection rows and their vbuckets straight into the count partitions; the backlogs of the throughput
measurement), `pool` and `roles` (bench/reconcile's spawned processes, plus a role that runs a migration's ops job
as a worker runs it, timing the protocol's steps), `runs` (ours, the naive stop-the-world move, the raw COPY
ceiling), `phases`, `checks` (the final exact check) and `report`."""

from __future__ import annotations

from bench.common import make_log

log = make_log("migration")

# This benchmark's own database set (bench/migration.sh): the run moves routes, so never the shared likes_bench*.
DB_NAME = "likes_bench_mig"
BOOTSTRAP = ("cnt_00", "cnt_01")
TARGET = "cnt_02"
SEED_VIDEO_PREFIX = "bench-mig-v"
SEED_USER_BASE = 3_000_000_000  # seeded projection rows' user ids: far above any Django user id of the run
SEED_USERS = 200_000
LOAD_VIDEO_PREFIX = "bench-mig-load-"
BURST_VIDEO_PREFIX = "bench-mig-burst-"
OPERATOR = "bench-mig-operator"  # plans the migrations
APPROVER = "bench-mig-approver"  # approves them (another person)
# The generation the baselines write to, always rolled back (far above any real generation).
SCRATCH_GENERATION = 2_000_000_000


def check_own_databases() -> None:
    """Refuse anything but this benchmark's own databases with three count partitions, two bootstrapped."""
    from django.conf import settings

    for alias, cfg in settings.DATABASES.items():
        name = str(cfg["NAME"])
        if not (name == DB_NAME or name.startswith(DB_NAME + "_")):
            raise SystemExit(f"[migration] refusing: alias {alias} uses database {name!r}, not {DB_NAME}*; "
                             "use ./bench/migration.sh")
    if list(settings.COUNT_PARTITION_ALIASES) != [*BOOTSTRAP, TARGET] or \
            list(settings.COUNT_BOOTSTRAP_PARTITIONS) != list(BOOTSTRAP):
        raise SystemExit(f"[migration] refusing: needs COUNT_PARTITIONS=3 and COUNT_BOOTSTRAP_PARTITIONS="
                         f"{','.join(BOOTSTRAP)} (got {settings.COUNT_PARTITION_ALIASES}, "
                         f"{settings.COUNT_BOOTSTRAP_PARTITIONS}); use ./bench/migration.sh")
