"""What the audit chain's tests share (tests/test_audit_chain*.py): rows appended as the service appends them,
the chain's head, damage done as an attacker holding the database's superuser would (the append-only trigger
switched off in SQL), the verifier's command and the link check."""

from __future__ import annotations

import io
import itertools
import json

from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections, transaction

from likes_project.audit import selectors
from likes_project.audit.models import AuditRecord
from likes_project.audit.services import audit_record
from tests.factories import TEST_ACTOR

TABLE = AuditRecord._meta.db_table
TRIGGER = "pgtrigger_audit_append_only_ecc7d"


def record(target_id: str = "t", params: dict | None = None) -> AuditRecord:
    with transaction.atomic(using="default"):
        return audit_record(actor=TEST_ACTOR, action="test.chain", target_type="test", target_id=target_id,
                            params={"n": 1} if params is None else params)


def records(n: int) -> list[AuditRecord]:
    return [record(f"t-{i}") for i in range(n)]


def head() -> int:
    return selectors.chain_head_get()[0]


def as_attacker(sql: str, *params) -> int:
    """What someone with the database's superuser does: switch the append-only trigger off, change the
    table, switch it on again."""
    with connections["default"].cursor() as cursor:
        cursor.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER {TRIGGER}")
        cursor.execute(sql, params)
        count = cursor.rowcount
        cursor.execute(f"ALTER TABLE {TABLE} ENABLE TRIGGER {TRIGGER}")
    return count


def verify(*args: str) -> tuple[int, dict, str]:
    """`manage.py audit_verify --json ARGS`: (exit code, the JSON of the last stdout line, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        call_command("audit_verify", "--json", *args, stdout=out, stderr=err)
    except CommandError as exc:
        code = exc.returncode
    lines = out.getvalue().strip().splitlines()
    return code, json.loads(lines[-1]), err.getvalue()


def assert_linked(rows: list[AuditRecord]) -> None:
    for before, after in itertools.pairwise(rows):
        assert (after.seq, after.prev_hash) == (before.seq + 1, before.row_hash)
