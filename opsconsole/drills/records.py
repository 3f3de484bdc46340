"""Drill records (spec TEST-5, issue 33 §2): every drill run leaves one `DrillRecord`, passed, failed or broken
off, with where it ran and the code it ran; `manage.py drill_records` and the console list them."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from functools import cache
from pathlib import Path

from django.db import transaction

from likes_project.audit.services import audit_record
from opsconsole.drills.population import DRILL_ACTOR
from opsconsole.drills.verdict import Verdict
from opsconsole.models import DrillRecord, DrillVerdict

ROOT = Path(__file__).resolve().parents[2]


@cache
def code_version() -> str:
    """`LIKES_CODE_VERSION` where the deployment sets it, else the checkout's commit (with `+changes` when its
    tracked files differ from it), else "unknown"."""
    if os.environ.get("LIKES_CODE_VERSION"):
        return os.environ["LIKES_CODE_VERSION"][:64]
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()

        commit = git("rev-parse", "--short=12", "HEAD")
        return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def record_write(drill, *, stage: str, started_at: dt.datetime, finished_at: dt.datetime,
                 verdict: Verdict | None, error: BaseException | None = None, requested_by: str = "",
                 seed: int | None = None, history_file: str = "") -> DrillRecord:
    """Keep one run of `drill` (a Drill instance or class): its verdict, or the exception it broke off with.
    Transaction: one on `default` (the record and its audit record)."""
    expected = drill.summary + (f"; every command answers 200 while {drill.commands_succeed_while}"
                                if drill.commands_succeed_while else "")
    if verdict is not None:
        outcome = DrillVerdict.PASS if verdict.passed else DrillVerdict.FAIL
        issues = [*verdict.failures, *(f"note: {n}" for n in verdict.notes)]
        actual, run_id = verdict.as_dict(), verdict.run_id
    else:
        outcome, issues, actual, run_id = DrillVerdict.ERROR, [f"{type(error).__name__}: {error}"], {}, ""
    with transaction.atomic(using="default"):
        record = DrillRecord.objects.create(
            drill=drill.name, spec_numbers=list(drill.spec_numbers), run_id=run_id, seed=seed, stage=stage,
            topology=os.environ.get("LIKES_TOPOLOGY", "single"), code_version=code_version(),
            requested_by=requested_by or os.environ.get("USER", "") or "unknown", started_at=started_at,
            finished_at=finished_at, expected=expected, actual=actual, verdict=outcome, open_issues="\n".join(issues),
            history_file=history_file)
        audit_record(actor=DRILL_ACTOR, action="drill.record", target_type="drill_record", target_id=str(record.pk),
                     params={"drill": drill.name, "verdict": outcome, "runId": run_id, "stage": stage},
                     outcome=outcome.lower())
    return record


def record_as_dict(r: DrillRecord) -> dict:
    return {"id": r.pk, "drill": r.drill, "specNumbers": r.spec_numbers, "runId": r.run_id, "seed": r.seed,
            "stage": r.stage, "topology": r.topology, "codeVersion": r.code_version, "requestedBy": r.requested_by,
            "startedAt": r.started_at.isoformat(), "finishedAt": r.finished_at.isoformat(), "expected": r.expected,
            "verdict": r.verdict, "openIssues": r.open_issues.splitlines() if r.open_issues else [],
            "historyFile": r.history_file, "actual": r.actual}
