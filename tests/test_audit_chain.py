"""The audit log is a hash chain (issue 14 §5, D82): every row written by `audit_record` carries a gap-free
`seq`, the previous row's hash and its own, appended under one advisory lock; hourly checkpoints (signed
when a key is set) catch a removed tail; `manage.py audit_verify` walks the chain and names the first
broken link. The damage here is done as an attacker holding the database's superuser would do it: the
append-only trigger switched off in SQL, then UPDATE or DELETE."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command
from django.db import connections, transaction

from likes_project.audit import chain, selectors
from likes_project.audit.jobs import VERIFY_JOB
from likes_project.audit.models import AuditChainCheckpoint, AuditChainVerification, AuditRecord
from likes_project.audit.services import audit_record, chain_checkpoint_write
from likes_project.audit.tasks import chain_checkpoint_task
from likes_project.opsjobs.models import OpsJob
from tests.auditchain import TABLE, as_attacker, assert_linked, head, record, records, verify
from tests.factories import TEST_ACTOR, grant, make_user

pytestmark = [pytest.mark.topology_independent, pytest.mark.schema]


# --- chaining -----------------------------------------------------------------------------------------


@pytest.mark.django_db(databases="__all__")
def test_new_rows_are_chained_and_each_hash_is_its_content():
    start = head()
    rows = records(3)
    assert [r.seq for r in rows] == [start + 1, start + 2, start + 3]
    assert_linked(rows)
    assert [r.at for r in rows] == sorted(r.at for r in rows)  # the database clock, read under the lock
    if start == 0:
        assert rows[0].prev_hash == chain.GENESIS
    for row in rows:
        stored = AuditRecord.objects.get(pk=row.pk)  # as the database gives it back
        assert stored.row_hash == chain.row_hash_compute(**{f: getattr(stored, f) for f in chain.HASHED_FIELDS})
    # the hash covers every field: one changed character is another hash
    fields = {f: getattr(rows[0], f) for f in chain.HASHED_FIELDS}
    assert chain.row_hash_compute(**{**fields, "target_id": "t-X"}) != rows[0].row_hash
    assert chain.row_hash_compute(**{**fields, "prev_hash": "1" * 64}) != rows[0].row_hash


@pytest.mark.django_db(databases="__all__")
def test_params_hash_as_the_database_gives_them_back():
    """jsonb keeps numbers as `numeric` and keys as strings: the hash taken before the insert must be the
    hash of what the row holds, or the honest row would look edited."""
    tricky = {"big": 1e20, "neg_zero": -0.0, "small": 1e-7, "int_key": {1: "a"}, "tuple": (1, 2.5),
              "text": "snow ☃ \"quoted\"", "nested": [{"b": 2, "a": [None, True]}], "huge": 2 ** 70}
    row = record(params=tricky)
    stored = AuditRecord.objects.get(pk=row.pk)
    assert stored.params == row.params  # what was hashed is what is stored
    assert stored.params["big"] == 10 ** 20 and isinstance(stored.params["big"], int)
    assert stored.row_hash == chain.row_hash_compute(**{f: getattr(stored, f) for f in chain.HASHED_FIELDS})
    code, payload, _ = verify()
    assert (code, payload["status"]) == (0, "intact")


@pytest.mark.django_db(databases="__all__")
def test_a_rolled_back_action_leaves_no_gap():
    start = head()
    with pytest.raises(ZeroDivisionError), transaction.atomic(using="default"):
        audit_record(actor=TEST_ACTOR, action="test.chain", target_type="test", target_id="gone", params={})
        1 / 0  # noqa: B018 - the action fails after its audit row: both roll back
    row = record("kept")
    assert (row.seq, head()) == (start + 1, start + 1)
    assert verify()[0] == 0


# --- tampering ----------------------------------------------------------------------------------------


@pytest.mark.django_db(databases="__all__")
def test_an_edited_row_is_caught_at_its_seq():
    rows = records(4)
    victim = rows[1]
    assert as_attacker(f"UPDATE {TABLE} SET params = '{{\"n\": 2}}' WHERE id = %s", victim.pk) == 1
    code, payload, _ = verify()
    assert code == 1
    assert payload["status"] == "broken"
    assert payload["firstBroken"]["seq"] == victim.seq
    assert payload["firstBroken"]["code"] == "row_changed"


@pytest.mark.django_db(databases="__all__")
def test_an_edit_that_rehashes_its_row_breaks_the_next_link():
    rows = records(3)
    victim = AuditRecord.objects.get(pk=rows[0].pk)
    fields = {f: getattr(victim, f) for f in chain.HASHED_FIELDS}
    forged = chain.row_hash_compute(**{**fields, "outcome": "forged"})
    as_attacker(f"UPDATE {TABLE} SET outcome = 'forged', row_hash = %s WHERE id = %s", forged, victim.pk)
    code, payload, _ = verify()
    assert code == 1
    assert (payload["firstBroken"]["seq"], payload["firstBroken"]["code"]) == (victim.seq + 1, "link_broken")


@pytest.mark.django_db(databases="__all__")
def test_a_deleted_middle_row_is_caught():
    rows = records(4)
    as_attacker(f"DELETE FROM {TABLE} WHERE id = %s", rows[2].pk)
    code, payload, _ = verify()
    assert code == 1
    assert (payload["firstBroken"]["seq"], payload["firstBroken"]["code"]) == (rows[2].seq, "row_missing")


@pytest.mark.django_db(databases="__all__")
def test_a_deleted_tail_is_caught_by_the_checkpoint():
    records(2)
    cp = chain_checkpoint_write()  # its own audit row is the head it names
    assert AuditRecord.objects.get(seq=cp.seq).action == "audit.chain_checkpoint"
    assert as_attacker(f"DELETE FROM {TABLE} WHERE seq > %s", cp.seq - 2) == 2
    code, payload, _ = verify()
    assert code == 1
    assert payload["firstBroken"]["code"] == "tail_missing"
    assert payload["firstBroken"]["seq"] == cp.seq - 1
    assert payload["checkpoint"]["id"] == cp.pk


@pytest.mark.django_db(databases="__all__")
def test_without_a_checkpoint_a_deleted_tail_cannot_be_seen():
    """What the checkpoint is for: the same deletion with no checkpoint leaves a chain that is whole."""
    assert not AuditChainCheckpoint.objects.exists()
    rows = records(3)
    as_attacker(f"DELETE FROM {TABLE} WHERE seq >= %s", rows[1].seq)
    code, payload, _ = verify()
    assert (code, payload["status"], payload["checkpoint"]) == (0, "intact", None)


@pytest.mark.django_db(databases="__all__")
def test_a_deleted_tail_with_new_rows_after_it_disagrees_with_the_checkpoint():
    records(2)
    cp = chain_checkpoint_write()
    as_attacker(f"DELETE FROM {TABLE} WHERE seq = %s", cp.seq)
    record("after")  # a new row takes the checkpoint's seq, chained onto the row before
    code, payload, _ = verify()
    assert code == 1
    assert (payload["firstBroken"]["seq"], payload["firstBroken"]["code"]) == (cp.seq, "checkpoint_mismatch")


@pytest.mark.django_db(databases="__all__")
def test_a_row_inserted_past_audit_record_is_reported():
    record()
    with connections["default"].cursor() as cursor:
        cursor.execute(f"INSERT INTO {TABLE} (at, actor, channel, action, target_type, target_id, params, outcome) "
                       "VALUES (now(), 'raw', 'cli', 'raw.insert', 'test', 'raw', '{}', 'applied') RETURNING id")
        raw_id = cursor.fetchone()[0]
    code, payload, _ = verify()
    assert code == 1
    assert payload["firstBroken"]["code"] == "unchained_row" and str(raw_id) in payload["firstBroken"]["problem"]


# --- signed checkpoints -------------------------------------------------------------------------------


@pytest.mark.django_db(databases="__all__")
def test_a_signed_checkpoint_verifies_and_the_key_is_never_logged(settings, caplog):
    settings.AUDIT_CHAIN_SIGNING_KEY = "k1-secret-signing-key"
    records(2)
    with caplog.at_level("DEBUG"):
        result = chain_checkpoint_task()
    cp = AuditChainCheckpoint.objects.get(pk=result["checkpoint"])
    assert result["signed"] and cp.key_id == chain.key_id_of("k1-secret-signing-key")
    assert chain.checkpoint_signature_valid("k1-secret-signing-key", at=cp.at, seq=cp.seq, row_hash=cp.row_hash,
                                            key_id=cp.key_id, signature=cp.signature)
    assert "k1-secret-signing-key" not in caplog.text and cp.signature in caplog.text
    code, payload, _ = verify()
    assert (code, payload["status"], payload["checkpoint"]["signatureChecked"]) == (0, "intact", True)


@pytest.mark.django_db(databases="__all__")
def test_a_forged_signature_is_caught(settings):
    settings.AUDIT_CHAIN_SIGNING_KEY = "k1-secret-signing-key"
    records(1)
    cp = chain_checkpoint_write()
    # the attacker deletes the tail and writes a checkpoint for the shorter chain, without the key
    as_attacker(f"DELETE FROM {TABLE} WHERE seq = %s", cp.seq)
    seq, row_hash = selectors.chain_head_get()
    forged = AuditChainCheckpoint.objects.create(at=cp.at, seq=seq, row_hash=row_hash, key_id=cp.key_id,
                                                 signature="0" * 64)
    code, payload, _ = verify()
    assert code == 1
    assert (payload["firstBroken"]["seq"], payload["firstBroken"]["code"]) == (seq, "checkpoint_signature")
    assert str(forged.pk) in payload["firstBroken"]["problem"]


@pytest.mark.django_db(databases="__all__")
def test_a_checkpoint_signed_with_another_key_or_unsigned_is_caught(settings):
    settings.AUDIT_CHAIN_SIGNING_KEY = "k1-secret-signing-key"
    records(1)
    chain_checkpoint_write()
    settings.AUDIT_CHAIN_SIGNING_KEY = "k2-another-key"
    code, payload, _ = verify()
    assert code == 1 and payload["firstBroken"]["code"] == "checkpoint_signature"
    assert "another key" in payload["firstBroken"]["problem"]

    settings.AUDIT_CHAIN_SIGNING_KEY = ""
    chain_checkpoint_write()  # unsigned
    settings.AUDIT_CHAIN_SIGNING_KEY = "k1-secret-signing-key"
    code, payload, _ = verify()
    assert code == 1 and "is not signed" in payload["firstBroken"]["problem"]
    # without a key the signatures are not checked (and the result says so)
    settings.AUDIT_CHAIN_SIGNING_KEY = ""
    code, payload, _ = verify()
    assert (code, payload["signingKey"], payload["checkpoint"]["signatureChecked"]) == (0, False, False)


# --- the command --------------------------------------------------------------------------------------


@pytest.mark.django_db(databases="__all__")
def test_the_command_reports_and_records_the_verdict():
    records(3)
    code, payload, _ = verify()
    assert code == 0
    assert set(payload) >= {"status", "checked", "headSeq", "firstBroken", "checkpoint", "verificationId"}
    assert (payload["status"], payload["firstBroken"], payload["sinceSeq"]) == ("intact", None, 1)
    assert payload["checked"] == payload["headSeq"]
    v = AuditChainVerification.objects.get(pk=payload["verificationId"])
    assert (v.status, v.head_seq, v.checked, v.broken_seq) == ("INTACT", payload["headSeq"], payload["checked"], None)
    audit = AuditRecord.objects.get(action="audit.chain_verify", params__verification=v.pk)
    assert (audit.outcome, audit.job_id) == ("intact", v.job_id)
    assert OpsJob.objects.get(pk=v.job_id).kind == VERIFY_JOB

    as_attacker(f"UPDATE {TABLE} SET actor = 'someone-else' WHERE seq = 2")
    code, payload, _ = verify()
    assert (code, payload["firstBroken"]["seq"]) == (1, 2)
    v = AuditChainVerification.objects.get(pk=payload["verificationId"])
    assert (v.status, v.broken_seq) == ("BROKEN", 2) and v.problem.startswith("row_changed")
    assert AuditRecord.objects.filter(action="audit.chain_verify", outcome="broken").count() == 1


@pytest.mark.django_db(databases="__all__")
def test_the_command_text_output():
    records(2)
    out, err = io.StringIO(), io.StringIO()
    call_command("audit_verify", stdout=out, stderr=err)
    assert out.getvalue().startswith("audit chain intact:")
    assert "no checkpoint yet" in out.getvalue()


@pytest.mark.django_db(databases="__all__")
def test_since_starts_the_walk_there_and_still_checks_the_link_before_it():
    rows = records(5)
    code, payload, _ = verify("--since", str(rows[2].seq))
    assert (code, payload["sinceSeq"], payload["checked"]) == (0, rows[2].seq, payload["headSeq"] - rows[2].seq + 1)
    # an ISO time: the first row at or after it
    code, payload, _ = verify("--since", rows[3].at.isoformat())
    assert (code, payload["sinceSeq"]) == (0, rows[3].seq)
    # the row before --since is gone: its link is what breaks
    as_attacker(f"DELETE FROM {TABLE} WHERE id = %s", rows[1].pk)
    code, payload, _ = verify("--since", str(rows[2].seq))
    assert code == 1 and (payload["firstBroken"]["seq"], payload["firstBroken"]["code"]) == (rows[1].seq,
                                                                                               "row_missing")


@pytest.mark.django_db(databases="__all__")
@pytest.mark.parametrize(("since", "code"), [("yesterday", "invalid_since"), ("0", "invalid_since"),
                                             ("-3", "invalid_since"), ("2026-13-45", "invalid_since"),
                                             ("99999999", "since_beyond_head"), ("2999-01-01", "since_beyond_head")])
def test_a_bad_since_is_refused_and_nothing_is_written(since, code):
    record()
    audits, jobs = AuditRecord.objects.count(), OpsJob.objects.count()
    exit_code, payload, _ = verify("--since", since)
    assert (exit_code, payload["code"]) == (3, code)
    assert (AuditRecord.objects.count(), OpsJob.objects.count(), AuditChainVerification.objects.count()) == (
        audits, jobs, 0)


@pytest.mark.django_db(databases="__all__")
def test_an_actor_without_the_permission_is_refused():
    user = make_user("chain-nobody")
    exit_code, payload, _ = verify("--actor", user.username)
    assert (exit_code, payload["code"]) == (3, "permission_denied")
    grant(user, "audit.verify_auditchain")
    exit_code, payload, _ = verify("--actor", user.username)
    assert (exit_code, payload["status"]) == (0, "intact")
    assert AuditChainVerification.objects.get(pk=payload["verificationId"]).actor == "chain-nobody"


@pytest.mark.django_db(databases="__all__")
def test_the_walk_is_resumable_in_slices(monkeypatch):
    """A long log on the workers: the job walks a page per slice here (a deadline already passed after each
    page) and the verdict is the same as in one go."""
    monkeypatch.setattr(selectors, "PAGE_ROWS", 2)
    records(5)
    state = selectors.chain_walk_begin(since=None)
    steps = 0
    while not state["done"]:
        state = json.loads(json.dumps(selectors.chain_walk_step(state, deadline=time.monotonic())))  # as job.state
        steps += 1
    assert steps >= 3 and state["broken"] is None and state["checked"] == state["headSeq"]


# --- the console page (permissions; the flow itself is in tests/opsconsole/test_audit_browser.py) ----------


@pytest.mark.django_db(databases="__all__")
def test_the_chain_page_shows_the_state_and_only_an_operator_may_start_a_verification(client):
    from django.contrib.auth import get_user_model

    url = "/admin/audit/auditrecord/chain/"
    viewer = get_user_model().objects.create_user("chain-viewer", password="pw", is_staff=True)
    grant(viewer, "audit.view_auditchainverification")
    client.force_login(viewer)
    page = client.get(url)
    assert page.status_code == 200 and b"Never verified" in page.content and b"chain-verify-form" not in page.content
    assert client.post(url, {"since": ""}).status_code == 403
    assert not OpsJob.objects.filter(kind=VERIFY_JOB).exists()

    grant(viewer, "audit.verify_auditchain")
    viewer = get_user_model().objects.get(pk=viewer.pk)  # permissions are cached on the instance
    client.force_login(viewer)
    assert b"chain-verify-form" in client.get(url).content
    bad = client.post(url, {"since": "not-a-time"})
    assert bad.status_code == 200 and b"neither a seq nor" in bad.content
    started = client.post(url, {"since": ""})
    job = OpsJob.objects.get(kind=VERIFY_JOB)
    assert started.status_code == 302 and started["Location"].endswith(f"/opsjobs/opsjob/{job.pk}/change/")
    assert not AuditChainVerification.objects.exists()  # nothing ran in the request

    staff = get_user_model().objects.create_user("chain-none", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(url).status_code == 403
