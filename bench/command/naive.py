"""The command path's naive baseline (a counter-row UPDATE inside the command's transaction, docs/benchmarks.md) and
the gunicorn apps of the command benchmarks (bench only, never deployed)."""

from __future__ import annotations

import functools

from bench.harness import roles
from bench.harness.seed import NAIVE_VIDEO_TABLE

_state = {"enabled": False, "installed": False}


def set_enabled(enabled: bool) -> None:
    """Toggle the extra UPDATE; while on, the command takes the statement-by-statement write path (D84)."""
    from django.conf import settings
    if enabled and not _state["enabled"]:
        _state["path"], settings.LIKE_COMMAND_WRITE_PATH = settings.LIKE_COMMAND_WRITE_PATH, "python"
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
        raise RuntimeError("relations.services.commands.outbox_event_write is gone; update bench/command/naive.py")

    @functools.wraps(original)
    def outbox_event_write_naive(*, alias: str, payload: dict, **kwargs):
        if _state["enabled"]:
            with connections[alias].cursor() as cursor:
                cursor.execute(f"UPDATE {NAIVE_VIDEO_TABLE} SET like_count = like_count + %s WHERE video_id = %s",
                               [1 if payload.get("absoluteState") == "LIKED" else -1, payload["videoId"]])
        return original(alias=alias, payload=payload, **kwargs)

    commands.outbox_event_write = outbox_event_write_naive
    _state["installed"] = True


def window(job: dict, ctl) -> dict:
    """The window role of harness/roles.py with the naive UPDATE on or off for the job."""
    install(enabled=job["naive"])
    return roles.window(job, ctl)


def naive_app():
    """gunicorn `bench.command.naive:naive_app()`: the application with the naive UPDATE in every worker."""
    from django.core.wsgi import get_wsgi_application
    app = get_wsgi_application()
    install(enabled=True)
    return app


def drf_token_app():
    """gunicorn `bench.command.naive:drf_token_app()`: the token lever's "before" (D85), DRF's TokenAuthentication."""
    from django.core.wsgi import get_wsgi_application
    app = get_wsgi_application()
    from rest_framework.authentication import SessionAuthentication, TokenAuthentication
    from rest_framework.views import APIView
    APIView.authentication_classes = [TokenAuthentication, SessionAuthentication]  # read at request time
    return app
