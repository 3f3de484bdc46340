"""The alert rules and the dashboard a platform team loads as they are (issue 32 §3): `promtool check rules` and
`promtool test rules` pass (Debian's promtool, installed by the test command like Chromium); every alert has a series
that fires it and one that does not; every alert the console's front page raises has a rule; each rule links a
runbook section that exists; and the rules and the Grafana dashboard name only metrics the service exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.topology_independent

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "likes.json"
RUNBOOK = ROOT / "docs" / "runbook.md"
APPS = ("likes_project", "relations", "counting", "reconciliation", "opsconsole")
# The front page's panels that can turn red, and the rule that raises the same alert outside the console.
CONSOLE_ALERTS = {
    "switches": "LikesSwitchSet", "outbox": "LikesOutboxStuck", "lag": "LikesConsumerLagging",
    "dead_letters": "LikesDeadLetters", "diffs": "LikesReconcileDiffsOpen", "repairs": "LikesRepairAwaitingApproval",
    "moves": "LikesLedgerWaiting", "subscriptions": "LikesSubscriptionLagging", "verdicts": "LikesReconcileFailed",
    "hotspots": "LikesPartitionSkew", "retention": "LikesRetentionBehind",
}
NEVER_ALERTS = {"jobs"}  # a list of what runs, never red
# The ones the issue names beyond the console's.
ALSO_REQUIRED = {"LikesConvergenceWindowExceeded", "LikesReconcileScheduleOverdue", "LikesSnapshotStale",
                 "LikesSnapshotTestRestoreFailed", "LikesSubscriptionBehindRetention", "LikesRiskFailOpen"}


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def promtool(*args: str, cwd: Path = RULES.parent) -> subprocess.CompletedProcess:
    tool = shutil.which("promtool")
    if tool is None:  # a machine where the test command could not install it (not root): said, not hidden
        pytest.skip("no promtool (Debian's prometheus package; the test command installs it when run as root)")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_promtool_checks_the_rules_and_their_unit_tests_pass():
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout
    tested = promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_unit_tests_fail_when_a_rule_is_broken(tmp_path):
    """The unit tests can fail: with the outbox threshold raised past what the firing series reaches, they do."""
    broken = RULES.read_text().replace("likes_outbox_oldest_pending_age_seconds) > 60",
                                       "likes_outbox_oldest_pending_age_seconds) > 6000")
    assert broken != RULES.read_text()
    (tmp_path / "alerts.yml").write_text(broken)
    (tmp_path / "alerts_test.yml").write_text(RULE_TESTS.read_text())
    tested = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert tested.returncode != 0 and "LikesOutboxStuck" in tested.stdout + tested.stderr


def test_every_alert_has_a_series_that_fires_it_and_one_that_does_not():
    """Every rule's unit test in alerts_test.yml has a series that fires it and one that does not, which
    `promtool test rules` runs (above): among them OBS-3, LikesConvergenceWindowExceeded past the exported window
    (`likes_convergence_window_seconds`) and quiet within it."""
    fires, calm = set(), set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else calm).add(check["alertname"])
    names = {r["alert"] for r in rules()}
    assert fires == names and calm == names


def test_every_console_alert_and_the_named_ones_have_a_rule():
    names = {r["alert"] for r in rules()}
    assert set(CONSOLE_ALERTS.values()) | ALSO_REQUIRED <= names


@pytest.mark.django_db(databases="__all__")
def test_the_front_pages_panels_are_all_accounted_for():
    from opsconsole.dashboard import front_page

    keys = {panel.key for panel in front_page()["panels"]}
    assert keys == set(CONSOLE_ALERTS) | NEVER_ALERTS


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_each_rule_links_a_runbook_section_that_exists():
    anchors = {_slug(line.lstrip("#")) for line in RUNBOOK.read_text().splitlines() if line.startswith("#")}
    for rule in rules():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("docs/runbook.md#") and url.split("#", 1)[1] in anchors, rule["alert"]
        assert rule["labels"]["severity"] in ("page", "ticket", "info")
    # The sections' own links to other sections resolve too.
    for target in re.findall(r"\]\(#([^)]+)\)", RUNBOOK.read_text()):
        assert target in anchors, target


def exported_metric_names() -> set[str]:
    """Every metric name the service's code spells (`likes_...` string literals of the apps)."""
    names = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" not in path.parts:
                names |= set(re.findall(r"[\"'](likes_[a-z0-9_]+)[\"']", path.read_text()))
    return names


def metrics_in(expr: str) -> set[str]:
    found = set(re.findall(r"\b(likes_[a-z0-9_]+)\b", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) if n.endswith(("_bucket", "_sum", "_count")) else n for n in found}


def test_the_rules_and_the_dashboard_name_only_metrics_the_service_exports():
    known = exported_metric_names()
    assert {"likes_commands_total", "likes_partition_skew_ratio", "likes_convergence_window_seconds"} <= known
    used = {n for r in rules() for n in metrics_in(r["expr"])}
    dashboard = json.loads(DASHBOARD.read_text())
    used |= {n for p in dashboard["panels"] for t in p.get("targets", []) for n in metrics_in(t["expr"])}
    assert used and not used - known, sorted(used - known)
    assert metrics_in("rate(likes_no_such_metric_total[5m])") - known  # the check can fail


def test_the_dashboard_is_a_valid_grafana_dashboard_of_the_front_pages_panels():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    assert any(v["type"] == "datasource" and v["name"] == "datasource" for v in dashboard["templating"]["list"])
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for p in dashboard["panels"]:
        grid = p["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["type"] in ("timeseries", "table", "stat") and p["targets"], p["title"]
        for t in p["targets"]:
            assert t["expr"] and t["refId"] and t["datasource"]["uid"] == "${datasource}", p["title"]
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for what in ("outbox", "consumer lag", "dead letters", "diffs", "verdict", "migrations", "subscriptions",
                 "ops jobs", "switches", "retention", "share of writes", "skew", "hottest videos"):
        assert what in titles, what
