"""The soak's history checker (issue 33 §1): the history against itself and against the stores after the heal.

It fails on:
1. an acknowledged command whose effect is missing from the facts: the fact of each relation is that of its last
   acknowledged command, or of a later unacknowledged one (the fact's `last_operation_id` names it);
2. a relation version going backwards across one client's acknowledged answers;
3. one Idempotency-Key answered with two different versions;
4. a batch query answering below the `minRelationVersions` it carried;
5. a 500, or any 5xx without a stable `code`;
6. after the heal, a projection differing from the facts (displayCount = facts − hidden, likers, my-likes and
   myState: the drills' comparison), or the exact reconciliation of the soak's videos not PASSED.
Each violation quotes the history lines it stands on."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from opsconsole.drills.api import DrillApi
from opsconsole.drills.checks import Comparison, projections_compare
from opsconsole.drills.population import DRILL_ACTOR, Population
from opsconsole.drills.traffic import Ack
from opsconsole.soak.history import lines
from relations import routing
from relations.models import LikeRelation
from relations.selectors.privacy import policy_hidden_user_ids

Fact = tuple[str, int, str]  # state, version, last operation id


@dataclass
class Report:
    outcomes: dict[str, int] = field(default_factory=dict)  # "command 200", "batch 503 degraded_overloaded", ...
    violations: list[dict] = field(default_factory=list)  # {"rule", "text", "lines"}
    comparison: dict = field(default_factory=dict)
    reconciliation: dict = field(default_factory=dict)

    def add(self, rule: int, text: str, *history: dict) -> None:
        self.violations.append({"rule": rule, "text": text, "lines": list(history)[:6]})

    @property
    def clean(self) -> bool:
        return not self.violations


def facts_read(population: Population) -> dict[tuple[int, str], Fact]:
    out: dict[tuple[int, str], Fact] = {}
    for alias, users in routing.group_users_by_alias(u.user_id for u in population.users).items():
        rows = LikeRelation.objects.using(alias).filter(user_id__in=users, video_id__in=population.videos)
        for u, v, s, ver, op in rows.values_list("user_id", "video_id", "state", "relation_version",
                                                 "last_operation_id"):
            out[(u, v)] = (s, ver, op)
    return out


def history_check(path: Path, facts: dict[tuple[int, str], Fact], report: Report) -> dict[tuple[int, str], Ack]:
    """Rules 1 to 5 over the history; returns what each relation's fact should be (for rule 6)."""
    commands: dict[tuple[int, str], list[dict]] = defaultdict(list)
    versions_by_key: dict[str, dict[int, dict]] = defaultdict(dict)
    last_by_client: dict[tuple[str, str], dict] = {}
    for line in lines(path):
        kind = line.get("kind")
        if kind not in ("command", "batch", "read"):
            continue
        status = line.get("status")
        label = f"{kind} {status if status is not None else line.get('error', 'no answer')}"
        label += f" {line['code']}" if line.get("code") else ""
        report.outcomes[label] = report.outcomes.get(label, 0) + 1
        if status is not None and status >= 500 and (status == 500 or not line.get("code")):
            report.add(5, f"{kind} answered {status} {line.get('code') or 'without a code'}", line)
        if kind == "batch" and status == 200:
            for video, (_state, version) in (line.get("items") or {}).items():
                if video in line["min"] and version is not None and version < line["min"][video]:
                    report.add(4, f"batch answered {video} at v{version}, below minRelationVersions "
                                  f"v{line['min'][video]}", line)
        if kind != "command":
            continue
        commands[(line["user"], line["video"])].append(line)
        if status == 200 and line.get("version") is not None:
            seen = versions_by_key[line["key"]]
            if seen and line["version"] not in seen:
                report.add(3, f"key {line['key']} answered v{line['version']} and v{min(seen)}",
                           next(iter(seen.values())), line)
            seen.setdefault(line["version"], line)
            if line.get("replayed"):
                continue  # an operation's stored verdict: its version is that of its time, judged by rule 3
            previous = last_by_client.get((line["client"], line["video"]))
            if previous is not None and line["version"] < previous["version"]:
                report.add(2, f"{line['client']} on {line['video']}: v{line['version']} after v{previous['version']}",
                           previous, line)
            last_by_client[(line["client"], line["video"])] = line
    expected: dict[tuple[int, str], Ack] = {}
    for pair in sorted(set(commands) | set(facts)):
        state, version, op = facts.get(pair, ("UNLIKED", 0, ""))
        sent = commands.get(pair, [])
        acked = [c for c in sent if c.get("status") == 200 and c.get("version") is not None and not c.get("replayed")]
        last = acked[-1] if acked else None
        top = last["version"] if last else 0
        if version < top:
            report.add(1, f"user {pair[0]} video {pair[1]}: acknowledged {last['state']} v{top}, the fact is "
                          f"{state} v{version}", last)
            expected[pair] = Ack(0, last["key"], last["state"], top)
            continue
        if version == top and last is not None and state != last["state"]:
            report.add(1, f"user {pair[0]} video {pair[1]}: acknowledged {last['state']} v{top}, the fact is {state}",
                       last)
        elif version > top:
            mine = [c for c in sent if c.get("key") == op]
            if not mine or mine[-1].get("desired") != state:
                report.add(1, f"user {pair[0]} video {pair[1]}: the fact {state} v{version} (operation {op}) is no "
                              f"command of the history after the last acknowledged v{top}", *(mine or sent[-1:]))
        expected[pair] = Ack(0, op, state, version)
    return expected


def count_hidden(population: Population) -> frozenset[int]:
    """The soak's accounts whose likes are out of public counts now (the risk scorer may have down-weighted or
    frozen a toggler)."""
    return frozenset(policy_hidden_user_ids()) & {u.user_id for u in population.users}


def compare(population: Population, expected: dict[tuple[int, str], Ack]) -> Comparison:
    return projections_compare(DrillApi(), population, expected, count_hidden=count_hidden(population))


def stores_check(population: Population, expected: dict[tuple[int, str], Ack], report: Report) -> Comparison:
    """Rule 6: the drills' comparison of every projection with the facts (displayCount = facts − hidden)."""
    comparison = compare(population, expected)
    report.comparison = comparison.as_dict()
    if not comparison.ok:
        rows = [f"video {v.video_id}: acknowledged {v.acknowledged}, facts {v.facts} ({v.hidden} hidden), displayCount "
                f"{v.display_count}, batch {v.batch_count}, likers {v.likers}" for v in comparison.videos if not v.ok]
        rows += [f"user {u.username}: facts {u.facts}, my-likes {u.my_likes}, myState {u.my_state}"
                 for u in comparison.users if not u.ok]
        first = "; ".join((comparison.partial + comparison.errors + rows)[:4])
        report.add(6, f"projections differ from the facts after the heal: {comparison.mismatches()} mismatches, "
                      f"{len(comparison.errors)} unreadable ({first})")
    return comparison


REFUSED_ATTEMPTS = 3  # an exact run that could not establish its barrier claims nothing: it is run again, as an
# operator would, and only a refusal every time is a violation


def reconciliation_check(population: Population, report: Report) -> None:
    from likes_project.opsjobs.services import job_run_inline, job_start
    from reconciliation.jobs import job_for_mode
    from reconciliation.models import CheckRun
    from reconciliation.services.checks import scope_normalize

    scope = scope_normalize(videos=population.videos)
    refusals = []
    for _attempt in range(REFUSED_ATTEMPTS):
        done = job_run_inline(job_start(kind=job_for_mode("exact"), actor=DRILL_ACTOR,
                                        params={"mode": "exact", "scope": scope}).pk)
        run = CheckRun.objects.get(pk=done.params["runId"])
        if run.status != "REFUSED":
            break
        refusals.append(f"run {run.pk}: {run.refused_because}")
    report.reconciliation = {"runId": run.pk, "status": run.status, "checked": run.checked, "diffs": run.diffs_found}
    if refusals:
        report.reconciliation["refusedBefore"] = refusals
    if run.status != "PASSED":
        report.add(6, f"the exact reconciliation of the soak's videos ended {run.status} ({run.diffs_found} diffs, "
                      f"run {run.pk}{'; refused: ' + ' | '.join(refusals) if refusals else ''})")
