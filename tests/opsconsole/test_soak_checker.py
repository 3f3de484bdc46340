"""The soak's history checker (issue 33 §1) on histories written by hand: a clean one passes, and each rule fails on
the violation it is for (a lost acknowledged like, a version backwards, one key with two versions, a batch below its
floor, a 500 or a 5xx without a code), while the look-alikes that are not violations pass (an unacknowledged
command the facts show, a late replay answered from its stored verdict, a 503 with its code). No stores: the facts
are given."""

from __future__ import annotations

import pytest

from opsconsole.soak.checker import Report, history_check
from opsconsole.soak.history import History

pytestmark = [pytest.mark.topology_independent]


def check(tmp_path, facts: dict, *history: dict) -> Report:
    h = History(tmp_path / "h.jsonl")
    for line in history:
        h.write(**line)
    h.close()
    report = Report()
    history_check(tmp_path / "h.jsonl", facts, report)
    return report


def cmd(key: str, desired: str, status: int | None = 200, version: int | None = None, *, user: int = 1,
        video: str = "v", client: str = "c", replayed: bool = False, code: str | None = None) -> dict:
    line = {"kind": "command", "client": client, "user": user, "video": video, "key": key, "desired": desired,
            "status": status, "code": code}
    if status == 200:
        line.update(version=version, state=desired, replayed=replayed)
    return line


def rules(report: Report) -> list[int]:
    return sorted(v["rule"] for v in report.violations)


def test_a_clean_history_passes_with_its_look_alikes(tmp_path):
    report = check(
        tmp_path, {(1, "v"): ("UNLIKED", 3, "k3"), (2, "w"): ("LIKED", 1, "k9")},
        cmd("k1", "LIKED", version=1),
        cmd("k2", "UNLIKED", version=2),
        cmd("k1", "LIKED", version=1, replayed=True),  # a late replay: the stored verdict's version
        cmd("k3", "UNLIKED", status=None),  # sent, never answered (a timeout) ...
        {"kind": "command", "client": "c", "user": 1, "video": "v", "key": "k3", "desired": "UNLIKED",
         "status": 503, "code": "service_unavailable"},  # ... a retry refused with its code
        cmd("k9", "LIKED", status=None, user=2, video="w", client="d"),  # the facts show it applied
        {"kind": "batch", "status": 200, "min": {"v": 2}, "items": {"v": ["UNLIKED", 3]}},
    )
    assert report.clean, report.violations
    assert report.outcomes == {"command 200": 3, "command no answer": 2, "command 503 service_unavailable": 1,
                               "batch 200": 1}


def test_an_acknowledged_like_missing_from_the_facts_is_rule_1(tmp_path):
    report = check(tmp_path, {(1, "v"): ("UNLIKED", 1, "k1")}, cmd("k1", "UNLIKED", version=1),
                   cmd("k2", "LIKED", version=2))
    assert rules(report) == [1] and "acknowledged LIKED v2" in report.violations[0]["text"]
    assert report.violations[0]["lines"][0]["key"] == "k2"  # the history line it stands on


def test_a_fact_no_command_of_the_history_made_is_rule_1(tmp_path):
    report = check(tmp_path, {(1, "v"): ("LIKED", 2, "stranger")}, cmd("k1", "UNLIKED", version=1))
    assert rules(report) == [1]


def test_a_version_backwards_is_rule_2_and_a_key_with_two_versions_rule_3(tmp_path):
    backwards = check(tmp_path, {(1, "v"): ("LIKED", 3, "k3")}, cmd("k1", "LIKED", version=3),
                      cmd("k2", "UNLIKED", version=2), cmd("k3", "LIKED", version=3))
    assert 2 in rules(backwards)
    twice = check(tmp_path, {(1, "v"): ("LIKED", 3, "k1")}, cmd("k1", "LIKED", version=1),
                  cmd("k2", "UNLIKED", version=2), cmd("k1", "LIKED", version=3))  # the old key applied again
    assert rules(twice) == [3]


def test_a_batch_below_its_floor_is_rule_4_and_a_500_or_a_bare_5xx_rule_5(tmp_path):
    report = check(tmp_path, {},
                   {"kind": "batch", "status": 200, "min": {"v": 4}, "items": {"v": ["LIKED", 3]}},
                   {"kind": "read", "status": 500, "code": "internal_error"},
                   {"kind": "read", "status": 502, "code": None},
                   {"kind": "read", "status": 503, "code": "service_unavailable"})
    assert rules(report) == [4, 5, 5]
