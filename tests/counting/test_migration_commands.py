"""The bucket-migration commands' contracts (issue 13 §6): plan ({"migrationId", "status": "AWAITING_APPROVAL",
"buckets", "rowsToCopy"}), approve --wait ({"migrationId", "status", "writePauseMs", "copiedRows",
"replayedEvents"}), show, resume, abort; refusals as a JSON envelope with a stable code and exit 1."""

from __future__ import annotations

import pytest

from counting import routing as count_routing
from counting.models import BucketMigration
from tests.reconciliation.helpers import api_liked_video, job_worker, manage, member_of

# The commands' contracts: the migration itself is a `topology` test of its own (test_bucket_migration,
# test_route_recovery), so this module runs on `single` only (D100).
pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True),
              pytest.mark.usefixtures("close_db_connections")]


@pytest.fixture
def operator():
    return member_of("likes-operator")


@pytest.fixture
def approver():
    return member_of("likes-approver")


def _plan(operator, buckets: str, to: str = "cnt_02") -> dict:
    ran = manage("bucket_migration_plan", "--to", to, "--buckets", buckets, "--reason", "scale out", "--actor",
                 operator.username, "--json")
    assert ran.code == 0, ran.err
    return ran.json


def test_plan_approve_wait_show_print_their_contracts(api, make_user, make_video, operator, approver):
    api_liked_video(api, make_user, make_video, "mc-1", 4)
    count_routing.reset_cache()
    on_00 = count_routing.active().buckets_on("cnt_00")
    planned = _plan(operator, f"{on_00[0]}-{on_00[0]},{on_00[1]}")
    assert {"migrationId", "status", "buckets", "rowsToCopy"} <= set(planned)
    assert planned["status"] == "AWAITING_APPROVAL" and planned["buckets"] == 2 and planned["rowsToCopy"] >= 0
    with job_worker():
        ran = manage("bucket_migration_approve", str(planned["migrationId"]), "--actor", approver.username, "--wait",
                     "--json")
    assert ran.code == 0, ran.err
    out = ran.json
    assert {"migrationId", "status", "writePauseMs", "copiedRows", "replayedEvents"} <= set(out)
    assert out["status"] == "RETIRED" and out["writePauseMs"] >= 0
    shown = manage("bucket_migration_show", str(planned["migrationId"]), "--json")
    assert shown.code == 0 and shown.json["status"] == "RETIRED" and shown.json["target"] == "cnt_02"
    assert shown.json["writePauseMs"] == out["writePauseMs"] and shown.json["approvedBy"] == approver.username
    text = manage("bucket_migration_show", str(planned["migrationId"]))
    assert "write pause" in text.out and "RETIRED" in text.out


def test_refusals_are_a_json_envelope_with_a_code_and_exit_1(operator, approver):
    bad = manage("bucket_migration_plan", "--to", "cnt_02", "--buckets", "zz", "--reason", "r", "--actor",
                 operator.username, "--json")
    assert bad.code == 1 and bad.json["code"] == "invalid_buckets"
    unknown = manage("bucket_migration_plan", "--to", "cnt_77", "--buckets", "0", "--reason", "r", "--actor",
                     operator.username, "--json")
    assert unknown.code == 1 and unknown.json["code"] == "unknown_partition"
    denied = manage("bucket_migration_plan", "--to", "cnt_02", "--buckets", "0", "--reason", "r", "--actor",
                    member_of("likes-viewer").username, "--json")
    assert denied.code == 1 and denied.json["code"] == "permission_denied"
    assert BucketMigration.objects.count() == 0
    planned = _plan(operator, "0-3")
    overlap = manage("bucket_migration_plan", "--to", "cnt_02", "--buckets", "2-5", "--reason", "r", "--actor",
                     operator.username, "--json")
    assert overlap.code == 1 and overlap.json["code"] == "migration_overlap"
    self_ok = manage("bucket_migration_approve", str(planned["migrationId"]), "--actor", operator.username, "--json")
    assert self_ok.code == 1 and self_ok.json["code"] in ("self_approval", "permission_denied")
    missing = manage("bucket_migration_show", "999999", "--json")
    assert missing.code == 1 and missing.json["code"] == "migration_not_found"
    resume = manage("bucket_migration_resume", str(planned["migrationId"]), "--actor", approver.username, "--json")
    assert resume.code == 1 and resume.json["code"] == "migration_not_resumable"
    aborted = manage("bucket_migration_abort", str(planned["migrationId"]), "--reason", "changed my mind", "--actor",
                     approver.username, "--json")
    assert aborted.code == 0 and aborted.json["status"] == "ABORTED"
    again = manage("bucket_migration_abort", str(planned["migrationId"]), "--reason", "x", "--json")
    assert again.code == 1 and again.json["code"] == "migration_past_cutover"
