"""The parts of the recovery-snapshot benchmark (bench/snapshot_bench.py, run by ./bench/snapshot.sh): `variants`
(a snapshot as the ops job builds it, the naive stop-the-world ORM dump, the raw SQL ceiling, and the two
baselines of the restore's load), `phases` (builds idle, builds under the command load, a damaged partition
restored from a sealed snapshot against repaired from the facts) and `report`. The data set, the spawned
processes, the command load, the pipeline's loops and the final check are bench/reconcile's."""

from __future__ import annotations

from pathlib import Path

from bench.common import make_log

log = make_log("snapshot")

# The artifacts and the baselines' files live in the bench's own storage directory (SNAPSHOT_STORAGE_DIR set by
# bench/snapshot.sh); its name must carry this mark, so the driver never empties another directory.
STORAGE_MARK = "likes-bench-snapshots"
# The generation number the baselines' loads write to, always rolled back (far above any real generation).
SCRATCH_GENERATION = 2_000_000_000


def storage_dir() -> Path:
    """The bench's snapshot storage directory (refuses any other: the driver empties it)."""
    from django.conf import settings

    path = Path(settings.SNAPSHOT_STORAGE_DIR)
    if settings.SNAPSHOT_STORAGE_BACKEND != "filesystem" or STORAGE_MARK not in path.name:
        raise SystemExit(f"[snapshot] refusing: SNAPSHOT_STORAGE_DIR must be a local directory named *{STORAGE_MARK}* "
                         f"(got {path}, backend {settings.SNAPSHOT_STORAGE_BACKEND}); use ./bench/snapshot.sh")
    return path


def storage_reset() -> None:
    """Empty the bench's snapshot storage directory (artifacts of earlier runs, the baselines' files)."""
    import shutil

    path = storage_dir()
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)


def baseline_dir(name: str) -> Path:
    path = storage_dir() / "bench-baselines" / name
    path.mkdir(parents=True, exist_ok=True)
    return path
