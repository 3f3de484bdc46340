"""The naive baseline: the same command transaction plus a hot counter row per video.

Nothing in production code changes. `relations.services.commands.outbox_event_write` runs inside the
command's durable transaction, on the user's relation shard, and only when the relation really changes;
the wrapper first runs `UPDATE bench_naive_video SET like_count = like_count +/- 1` on that same connection,
so the counter row lock is held until the command transaction commits, exactly like a synchronous
`UPDATE video SET like_count = like_count + 1` would be.
"""

from __future__ import annotations

import functools

NAIVE_TABLE = "bench_naive_video"
_UPDATE_SQL = f"UPDATE {NAIVE_TABLE} SET like_count = like_count + %s WHERE video_id = %s"

_state = {"enabled": False, "installed": False}


def set_enabled(enabled: bool) -> None:
    """Toggle the extra UPDATE. While it is on the command runs on the statement-by-statement write path
    (`LIKE_COMMAND_WRITE_PATH=python`, D84): the naive counter is one more statement inside that transaction,
    which the one-statement function has no place for."""
    from django.conf import settings

    if enabled and not _state["enabled"]:
        _state["path"] = settings.LIKE_COMMAND_WRITE_PATH
        settings.LIKE_COMMAND_WRITE_PATH = "python"
    elif not enabled and _state["enabled"]:
        settings.LIKE_COMMAND_WRITE_PATH = _state.pop("path")
    _state["enabled"] = bool(enabled)


def install(*, enabled: bool) -> None:
    """Wrap `outbox_event_write` once per process; `set_enabled` toggles the extra UPDATE."""
    from django.db import connections

    from relations.services import commands

    set_enabled(enabled)
    if _state["installed"]:
        return
    original = getattr(commands, "outbox_event_write", None)
    if original is None:
        raise RuntimeError("relations.services.commands.outbox_event_write is gone; update bench/naive.py")

    @functools.wraps(original)
    def outbox_event_write_naive(*, alias: str, payload: dict, **kwargs):
        if _state["enabled"]:
            delta = 1 if payload.get("absoluteState") == "LIKED" else -1
            with connections[alias].cursor() as cursor:
                cursor.execute(_UPDATE_SQL, [delta, payload["videoId"]])
        return original(alias=alias, payload=payload, **kwargs)

    commands.outbox_event_write = outbox_event_write_naive
    _state["installed"] = True
