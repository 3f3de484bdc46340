"""Fault drills (issue 9 §5): real faults injected into the running stores while commands flow, with
the invariants checked during the fault and after recovery. One implementation, run by the test suite
(tests/test_drills.py) and by operators (`manage.py drill <name>`):

- `scenarios`: the drills (what each injects and how answers are judged while it holds), which
  OpsconsoleConfig.ready registers (`registry`);
- `runner`: one run (population, traffic, fault, sampling, heal, verdict), the same for every drill;
- `faults`: the injectors; `stage`: what differs between a deployment and the test suite (killing and
  restarting workers, taking the cache Redis down);
- `checks`: facts vs projections, and the pipeline's backlog; `traffic`, `api`, `population`: the
  drill's own users, videos and commands; `verdict`: the report.
"""

from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.registry import DRILLS
from opsconsole.drills.runner import drill_run
from opsconsole.drills.verdict import Verdict

__all__ = ["DRILLS", "DrillRefused", "Verdict", "drill_run"]
