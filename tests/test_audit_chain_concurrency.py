"""The audit chain under concurrent appenders (issue 14 §5, D82): one advisory lock orders them, so a second
appender waits for the first to commit and extends its row, many threads make one unbroken chain, and without
the lock (the counter-example) two appenders extend the same head."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connections, transaction

from likes_project.audit import chain
from likes_project.audit.models import AuditRecord
from likes_project.audit.services import _HEAD_SQL, audit_record
from tests.auditchain import TABLE, assert_linked, head, record, verify
from tests.factories import TEST_ACTOR

pytestmark = [pytest.mark.topology_independent, pytest.mark.schema]


# --- concurrency --------------------------------------------------------------------------------------


def _waiting_on_the_chain_lock() -> bool:
    """Is some session waiting for the chain's advisory lock (not granted)?"""
    key = chain.CHAIN_LOCK_KEY
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                       "AND classid = %s AND objid = %s AND objsubid = 1 "
                       "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                       [key >> 32, key & 0xFFFFFFFF])
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(databases="__all__", transaction=True)
@pytest.mark.usefixtures("close_db_connections")
def test_a_second_appender_waits_for_the_first_to_commit_and_extends_its_row():
    """The lock is held from audit_record to the commit: B, appending while A's row is not committed,
    waits on the chain's advisory lock, then chains onto A's row."""
    start = head()
    a_appended, a_may_commit = threading.Event(), threading.Event()
    out: dict = {}

    def appender_a():
        with transaction.atomic(using="default"):
            out["a"] = audit_record(actor=TEST_ACTOR, action="test.a", target_type="test", target_id="a", params={})
            a_appended.set()
            assert a_may_commit.wait(30)

    def appender_b():
        assert a_appended.wait(30)
        out["b"] = record("b")

    threads = [threading.Thread(target=appender_a), threading.Thread(target=appender_b)]
    for t in threads:
        t.start()
    assert a_appended.wait(30)
    deadline = time.monotonic() + 30
    while not _waiting_on_the_chain_lock():  # B must be blocked on the lock itself, not merely slow
        assert time.monotonic() < deadline, "B never waited for the chain lock"
        time.sleep(0.02)  # polling pg_locks: there is no event for "another session started waiting"
    assert "b" not in out
    a_may_commit.set()
    for t in threads:
        t.join(30)
    assert (out["a"].seq, out["b"].seq) == (start + 1, start + 2)
    assert out["b"].prev_hash == out["a"].row_hash


@pytest.mark.django_db(databases="__all__", transaction=True)
@pytest.mark.usefixtures("close_db_connections")
def test_many_threads_appending_at_once_make_one_unbroken_chain():
    start = head()
    barrier = threading.Barrier(4)
    errors = []

    def appender(n: int):
        try:
            barrier.wait(30)
            for i in range(15):
                record(f"thread-{n}-{i}")
        except Exception as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=appender, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    rows = list(AuditRecord.objects.filter(seq__gt=start).order_by("seq"))
    assert [r.seq for r in rows] == list(range(start + 1, start + 61))
    assert_linked(rows)
    code, payload, _ = verify()
    assert (code, payload["status"], payload["headSeq"]) == (0, "intact", start + 60)  # the head at the job's start


@pytest.mark.django_db(databases="__all__", transaction=True)
@pytest.mark.usefixtures("close_db_connections")
def test_without_the_lock_two_appenders_extend_the_same_head():
    """The counter-example: the same head read and insert without the advisory lock. Both transactions
    read the same head, so both rows claim the same seq and prev_hash (a fork); the unique seq refuses
    the second one's action."""
    record("base")
    cfg = connections["default"].settings_dict
    info = {"dbname": cfg["NAME"], "host": cfg.get("HOST") or "127.0.0.1", "port": cfg.get("PORT") or 5432,
            "user": cfg.get("USER") or None, "password": cfg.get("PASSWORD") or None}
    sessions = [psycopg.connect(**{k: v for k, v in info.items() if v is not None}) for _ in range(2)]
    try:
        heads = [s.execute(_HEAD_SQL).fetchone()[1:] for s in sessions]  # each in its open transaction
        assert heads[0] == heads[1]  # both would extend the same row
        insert = (f"INSERT INTO {TABLE} (at, actor, channel, action, target_type, target_id, params, outcome, seq, "
                  "prev_hash, row_hash) VALUES (now(), 'x', 'cli', 'test.fork', 'test', %s, '{}', 'applied', %s, %s, "
                  "%s)")
        seq, prev = heads[0][0] + 1, heads[0][1]
        sessions[0].execute(insert, ["fork-1", seq, prev, "a" * 64])
        sessions[0].commit()
        with pytest.raises(psycopg.errors.UniqueViolation):
            sessions[1].execute(insert, ["fork-2", seq, prev, "b" * 64])
    finally:
        for s in sessions:
            s.rollback()
            s.close()
