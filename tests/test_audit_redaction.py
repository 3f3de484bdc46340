"""A deleted account is named in the audit log by its pseudonym only (issue 31 §4, PRIV-4;
likes_project.audit.redaction): its records keep their place in the chain, the redaction is on record (an
`audit.redact` row listing them), the verifier accepts a redacted row only when that record lists it, and the
append-only trigger lets exactly the redaction's UPDATE through."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connections, transaction

from likes_project.audit import redaction
from likes_project.audit.models import REDACT_ACTION, AuditRecord
from likes_project.audit.redaction import audit_redact_user
from likes_project.audit.services import api_actor, audit_record, chain_checkpoint_write
from likes_project.erasure import account_erasers, user_pseudonym
from tests.auditchain import TABLE, as_attacker, verify
from tests.factories import TEST_ACTOR

pytestmark = [pytest.mark.topology_independent]

UID, OTHER = 987_654_321, 987_654_322  # ids whose digits cannot turn up by chance in a record


def users():
    User = get_user_model()
    return User.objects.create(id=UID, username="carol-gone"), User.objects.create(id=OTHER, username="dave-stays")


def rec(action: str, target_type: str, target_id, params: dict, actor=TEST_ACTOR) -> AuditRecord:
    with transaction.atomic(using="default"):
        return audit_record(actor=actor, action=action, target_type=target_type, target_id=str(target_id),
                            params=params)


def raw(sql: str, *params) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute(sql, params)


def refused(sql: str, *params) -> None:
    with pytest.raises(DatabaseError, match="Cannot update or delete rows"), transaction.atomic(using="default"):
        raw(sql, *params)


@pytest.mark.django_db(databases="__all__")
def test_a_deleted_accounts_records_keep_only_its_pseudonym_and_the_chain_verifies(monkeypatch):
    monkeypatch.setattr(redaction, "SCAN_ROWS", 2)  # the scan in slices of the seq index, none left out
    gone, stays = users()
    naming = [
        rec("account.delete", "user", UID, {"username": "carol-gone"}),
        rec("job.start", "ops_job", 7, {"kind": "account.delete", "target": f"user:{UID}",
                                        "params": {"user_id": UID, "username": "carol-gone", "progress_every": 5}}),
        rec("test.bulk", "video", "v1", {"users": [OTHER, UID, str(UID)], "nested": [{"authorId": UID}]}),
        rec("privacy.set", "user", UID, {"likesPrivate": True}, actor=api_actor(UID)),
    ]
    keeps = [
        rec("account.delete", "user", OTHER, {"username": "dave-stays"}),
        rec("risk.hide.apply", "risk_decision", 3, {"users": UID, "video": "v1"}),  # a count, not a user
    ]
    checkpoint = chain_checkpoint_write()

    assert audit_redact_user(UID) == {"redacted": 4}

    pseudonym = user_pseudonym(UID)
    rows = {r.pk: r for r in AuditRecord.objects.all()}
    for row in rows.values():
        if row.pk != keeps[1].pk:
            assert str(UID) not in row.target_id + row.actor + json.dumps(row.params), row.action
        assert "carol-gone" not in row.target_id + row.actor + json.dumps(row.params), row.action
    redacted = [rows[r.pk] for r in naming]
    assert all(r.redacted_at is not None for r in redacted)
    assert [(r.seq, r.prev_hash, r.row_hash) for r in redacted] == [(r.seq, r.prev_hash, r.row_hash) for r in naming]
    assert (redacted[0].target_id, redacted[0].params) == (pseudonym, {"username": pseudonym})
    assert redacted[1].params == {"kind": "account.delete", "target": f"user:{pseudonym}",
                                  "params": {"user_id": pseudonym, "username": pseudonym, "progress_every": 5}}
    assert redacted[2].params == {"users": [OTHER, pseudonym, pseudonym], "nested": [{"authorId": pseudonym}]}
    assert (redacted[3].actor, redacted[3].target_id) == (f"user:{pseudonym}", pseudonym)
    for before in keeps:
        after = rows[before.pk]
        assert (after.target_id, after.params, after.redacted_at) == (before.target_id, before.params, None)

    on_record = AuditRecord.objects.get(action=REDACT_ACTION)
    assert (on_record.target_type, on_record.target_id) == ("user_pseudonym", pseudonym)
    assert on_record.params["seqs"] == [r.seq for r in naming]
    assert on_record.params["rowHashes"] == {str(r.seq): r.row_hash for r in naming}
    assert {r.redacted_at for r in redacted} == {on_record.at}

    code, payload, _ = verify()  # every row, the redacted ones by their redaction record, and the checkpoint
    assert (code, payload["status"], payload["checkpoint"]["id"]) == (0, "intact", checkpoint.pk)

    assert audit_redact_user(UID) == {"redacted": 0}  # idempotent: nothing names the account any more
    assert AuditRecord.objects.filter(action=REDACT_ACTION).count() == 1
    assert account_erasers()["audit"] is audit_redact_user
    assert gone.username == "carol-gone" and stays.pk == OTHER


@pytest.mark.django_db(databases="__all__")
def test_a_record_naming_two_deleted_accounts_is_redacted_twice_and_still_verifies():
    users()
    both = rec("test.bulk", "video", "v1", {"users": [UID, OTHER]})
    assert audit_redact_user(UID) == {"redacted": 1}
    first = AuditRecord.objects.get(pk=both.pk).redacted_at
    assert audit_redact_user(OTHER) == {"redacted": 1}  # the trigger lets redacted_at move forward
    row = AuditRecord.objects.get(pk=both.pk)
    assert row.params == {"users": [user_pseudonym(UID), user_pseudonym(OTHER)]}
    assert first < row.redacted_at == AuditRecord.objects.filter(action=REDACT_ACTION).order_by("-seq")[0].at
    code, payload, _ = verify()
    assert (code, payload["status"]) == (0, "intact")


@pytest.mark.django_db(databases="__all__")
def test_the_trigger_lets_only_the_redaction_through():
    users()
    row = rec("account.delete", "user", UID, {"username": "carol-gone"})
    later = rec("test.chain", "test", "t", {"n": 1})
    refused(f"UPDATE {TABLE} SET params = '{{}}' WHERE id = %s", row.pk)  # not marked redacted
    refused(f"UPDATE {TABLE} SET params = '{{}}', outcome = 'forged', redacted_at = now() WHERE id = %s", row.pk)
    refused(f"UPDATE {TABLE} SET row_hash = repeat('1', 64), redacted_at = now() WHERE id = %s", row.pk)
    refused(f"UPDATE {TABLE} SET actor = 'someone', redacted_at = now() WHERE id = %s", row.pk)
    refused(f"DELETE FROM {TABLE} WHERE id = %s", row.pk)
    audit_redact_user(UID)
    refused(f"UPDATE {TABLE} SET redacted_at = NULL WHERE id = %s", row.pk)  # an undone redaction
    refused(f"UPDATE {TABLE} SET params = '{{}}', redacted_at = redacted_at - interval '1 s' WHERE id = %s", row.pk)
    refused(f"DELETE FROM {TABLE} WHERE id = %s", row.pk)
    assert AuditRecord.objects.get(pk=later.pk).redacted_at is None


@pytest.mark.django_db(databases="__all__")
def test_a_redaction_without_its_record_is_reported():
    """The counter-example: the UPDATE the trigger lets through, sent by hand, with no audit.redact record."""
    users()
    rec("test.chain", "test", "before", {"n": 1})
    row = rec("account.delete", "user", UID, {"username": "carol-gone"})
    rec("test.chain", "test", "after", {"n": 1})
    raw(f"UPDATE {TABLE} SET params = '{{\"username\": \"someone-else\"}}', redacted_at = now() WHERE id = %s",
        row.pk)
    code, payload, _ = verify()
    assert (code, payload["firstBroken"]["seq"], payload["firstBroken"]["code"]) == (1, row.seq,
                                                                                      "redaction_unrecorded")


@pytest.mark.django_db(databases="__all__")
def test_a_redacted_row_changed_after_its_redaction_is_reported():
    users()
    row = rec("account.delete", "user", UID, {"username": "carol-gone"})
    audit_redact_user(UID)
    assert verify()[0] == 0
    as_attacker(f"UPDATE {TABLE} SET params = '{{\"username\": \"forged\"}}' WHERE id = %s", row.pk)
    code, payload, _ = verify()
    assert (code, payload["firstBroken"]["seq"], payload["firstBroken"]["code"]) == (1, row.seq,
                                                                                      "redaction_unrecorded")
