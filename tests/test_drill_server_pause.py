"""The soak's `pg-hang` (issue 33 §1): the second PostgreSQL server of `scaled` stopped with SIGSTOP (a store that
hangs instead of refusing) and continued with SIGCONT; refused where it would stop `default`'s server or one this
service's scripts did not start, and undone by `drill --restore-databases` when the soak itself was killed."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connections

from opsconsole.drills.faults import DrillRefused, ServerPause, private_servers_continue, second_server_aliases
from opsconsole.soak import faults as soak_faults
from opsconsole.soak.schedule import faults_parse

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def _answers_within(alias: str, seconds: float) -> bool:
    """Whether a new session to `alias` answers `SELECT 1` within `seconds` (a paused server never does)."""
    cfg = connections[alias].settings_dict
    answered = threading.Event()

    def ask():
        try:
            with psycopg.connect(host=cfg["HOST"], port=cfg["PORT"], user=cfg["USER"], dbname=cfg["NAME"],
                                 connect_timeout=10) as conn:
                conn.execute("SELECT 1")
                answered.set()
        except psycopg.Error:
            pass

    threading.Thread(target=ask, daemon=True).start()
    return answered.wait(seconds)


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (`T` stopped), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def test_pg_hang_is_named_only_and_refused_on_the_server_of_default():
    assert "pg-hang" not in faults_parse(None) and faults_parse("pg-hang") == ["pg-hang"]
    with pytest.raises(DrillRefused, match="shares the server of the `default` database"):
        ServerPause("rel_00").check()  # rel_00 lives beside `default` on every topology


# Runs in the suite's `scaled` pass (the only one with a second server); `single` runs the refusal test below instead.
@pytest.mark.skipif(not second_server_aliases(), reason="needs the second PostgreSQL server of LIKES_TOPOLOGY=scaled")
@pytest.mark.exclusive  # stops a server the suite's other workers use
def test_pg_hang_stops_the_second_server_until_it_ends_and_restore_continues_a_forgotten_one():
    alias = second_server_aliases()[0]
    assert _answers_within(alias, 5.0)
    pause = ServerPause(alias)
    said = pause.begin()
    try:
        assert "SIGSTOP" in said and len(pause.pids) > 1
        assert not _answers_within(alias, 1.0), "a stopped server answered"
    finally:
        pause.end()
    assert _answers_within(alias, 5.0)

    forgotten = ServerPause(alias)  # a soak killed mid-window: nothing called end()
    forgotten.begin()
    try:
        assert not _answers_within(alias, 1.0)
    finally:
        continued = private_servers_continue()
    assert any(n >= len(forgotten.pids) for n in continued.values()), continued
    assert not [pid for pid in forgotten.pids if _state(pid) == "T"], "a process of the server is still stopped"
    assert _answers_within(alias, 5.0)


# The counterpart: runs in the `single` pass, where pg-hang has no server it may stop.
@pytest.mark.skipif(bool(second_server_aliases()), reason="the single topology has no second server")
def test_the_soak_refuses_pg_hang_without_a_second_server():
    with pytest.raises(DrillRefused, match="second PostgreSQL server"):
        soak_faults.check(["pg-hang"], stage=None)
