"""A drill's verdict: what was injected, what was seen during the fault, how long healing took, and
the exact comparison of projections with facts afterwards; as text for an operator or as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass
class Verdict:
    drill: str
    stage: str
    run_id: str = ""
    injected: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    fault_s: float = 0.0
    fault_confirmed: bool | None = None
    phases: dict[str, dict] = field(default_factory=dict)
    backlog_max: dict = field(default_factory=dict)
    heal_s: float | None = None
    heal_timeout_s: float = 120.0
    resolved: dict = field(default_factory=dict)
    retries: dict = field(default_factory=dict)
    comparison: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed, "verdict": "PASS" if self.passed else "FAIL"}

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, default=str)

    def as_text(self) -> str:
        out = [f"drill {self.drill} ({self.stage}, run {self.run_id})"]
        out += [f"  injected: {line}" for line in self.injected]
        confirmed = {True: "yes", False: "NO", None: "not checked"}[self.fault_confirmed]
        out.append(f"  fault held {self.fault_s:.1f} s; in effect while held: {confirmed}")
        out += [f"  recovered: {line}" for line in self.recovered]
        for phase, tally in self.phases.items():
            commands = ", ".join(f"{k}: {v}" for k, v in sorted(tally["commands"].items())) or "none"
            reads = ", ".join(f"{k}: {v}" for k, v in sorted(tally["reads"].items())) or "none"
            out.append(f"  {phase}: commands {commands}")
            out.append(f"  {phase}: reads {reads}")
            out += [f"  {phase}: VIOLATION {v}" for v in tally["violations"]]
        b = self.backlog_max
        if b:
            out.append(f"  largest backlog during the fault: outbox {b.get('fault_outbox')} rows "
                       f"{b.get('fault_outbox_by_shard')}; consumer lag {b.get('fault_consumer_lag')} entries, "
                       f"oldest {b.get('fault_consumer_lag_s')} s; head retries {b.get('fault_blocked_attempts')}")
            out.append(f"  largest backlog while healing: outbox {b.get('heal_outbox')} rows; consumer lag "
                       f"{b.get('heal_consumer_lag')} entries")
        if self.resolved:
            out.append(f"  failed commands looked up after recovery: {self.resolved}")
        out.append("  healed in " + (f"{self.heal_s:.1f} s after the fault ended" if self.heal_s is not None
                                     else f"NOT within {self.heal_timeout_s:.0f} s"))
        if self.retries:
            out.append(f"  retries: {self.retries}")
        c = self.comparison
        if c:
            out.append("  per video: acknowledged / facts / displayCount / batch displayCount / likers")
            for v in c["videos"]:
                out.append(f"    {'ok ' if v['ok'] else 'BAD'} {v['video_id']}: {v['acknowledged']} / {v['facts']} / "
                           f"{v['display_count']} / {v['batch_count']} / {v['likers']}"
                           + ("" if v["likers_match"] else " (likers differ from the facts)"))
            out.append("  per user: acknowledged / facts / my-likes / batch myState (liked videos)")
            for u in c["users"]:
                mark = "ok " if u["ok"] else "BAD"
                out.append(f"    {mark} {u['username']} ({u['shard']}): {len(u['acknowledged'])} / "
                           f"{len(u['facts'])} / {_n(u['my_likes'])} / {_n(u['my_state'])}"
                           + ("" if u["ok"] else f"  facts={u['facts']} my-likes={u['my_likes']} "
                                                 f"myState={u['my_state']}"))
            out += [f"    PARTIAL {p}" for p in c["partial"]]
            out += [f"    UNREADABLE {e}" for e in c["errors"]]
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  FAIL: {f}" for f in self.failures]
        out.append("PASS" if self.passed else "FAIL")
        return "\n".join(out)


def _n(values) -> str:
    return "unreadable" if values is None else str(len(values))
