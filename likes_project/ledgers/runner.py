"""The step runner every approved ledger's protocol runs on (a virtual-bucket migration, a relation slot move): one
runner per ledger at a time, the step loop from the ledger's state, the ledger's saves, the job's tick and a test's
crash hook. A protocol module keeps only its steps: `RUNNER.run(ledger_id, STEPS, say=..., tick=...)`.

  lock       a session advisory lock (`lock`, ledger id) for the run: a second runner is refused with `waiting`
             (released when the process dies, so a dead worker's lock never outlives it);
  step loop  the step of the ledger's state, read again after every step, until the ledger is finished, waits
             (a step that leaves the state as it was), or is RETIRED with its source copy cleaned or not yet due;
  save       `save(m, **fields)` writes the ledger's progress and ticks: the job saves its progress and renews
             its lease there (at most once a second, the job's own business);
  beat       `beat(m)` ticks without saving (long work that writes nothing to the ledger: a verify, deletes);
  hook       `RUNNER.hook(m, point)` at a step's points of no return calls `RUNNER.step_hook`, a test's crash.

The tick is one context variable for every ledger kind: one thread runs one ledger at a time.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

from django.db import connections
from django.utils import timezone

from likes_project.audit.services import Actor, system_actor
from likes_project.ledgers.model import ApprovedLedgerModel, LedgerState
from likes_project.ledgers.service import ApprovedLedger

S = LedgerState
Say = Callable[[str], None]
Step = Callable[[ApprovedLedgerModel, Say], None]
_tick: contextvars.ContextVar[Callable[[ApprovedLedgerModel], None] | None] = contextvars.ContextVar(
    "ledger_tick", default=None)


def beat(m: ApprovedLedgerModel) -> None:
    """Long work that saves nothing to the ledger (a verify, deletes) still tells the job it is alive."""
    tick = _tick.get()
    if tick is not None:
        tick(m)


def save(m: ApprovedLedgerModel, **fields) -> None:
    """The ledger's progress written (no state change: that is `ApprovedLedger.transition`), then a beat."""
    type(m).objects.filter(pk=m.pk).update(**fields)
    for k, v in fields.items():
        setattr(m, k, v)
    beat(m)


def cleanup_due(m: ApprovedLedgerModel) -> bool:
    """RETIRED, its source copy still kept, and its retention passed."""
    return (m.state == S.RETIRED and m.source_cleaned_at is None and m.source_cleanup_after is not None
            and m.source_cleanup_after <= timezone.now())


class LedgerRunner:
    """The runner of one kind of ledger. `lock` is the advisory lock's first key ("LKSR"); a step raises `waiting`
    (the ledger's "cannot go on now" refusal) to end the job and leave the ledger where it is, to be resumed."""

    def __init__(self, ledger: ApprovedLedger, *, lock: int):
        self.ledger, self.lock, self.waiting = ledger, lock, ledger.waiting
        self.step_hook: Callable[[ApprovedLedgerModel, str], None] | None = None  # a test's crash injection

    def hook(self, m: ApprovedLedgerModel, point: str) -> None:
        if self.step_hook is not None:
            self.step_hook(m, point)

    def actor(self) -> Actor:
        return system_actor(self.ledger.executor)

    def stops(self, m: ApprovedLedgerModel) -> bool:
        """Nothing to run now: RETIRED with its cleanup done or not yet due, or a VERIFY that failed (the
        operator resumes it to verify again)."""
        if m.state == S.RETIRED:
            return not cleanup_due(m)
        return m.state == S.VERIFY and m.verify_result.get("ok") is False and bool(m.error)

    def run(self, ledger_id: int, steps: dict[str, Step], *, say: Say = lambda _m: None,
            tick: Callable[[ApprovedLedgerModel], None] | None = None) -> ApprovedLedgerModel:
        """Run the protocol from the ledger's state to RETIRED (or to where it must wait). Idempotent."""
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [self.lock, int(ledger_id)])
            if not cursor.fetchone()[0]:
                raise self.waiting(f"{self.ledger.noun} {ledger_id} is being run by another process")
        token = _tick.set(tick)
        try:
            while True:
                m = self.ledger.get(ledger_id)
                step = steps.get(m.state)
                if step is None or self.stops(m):
                    return m
                before = m.state
                step(m, say)
                m = self.ledger.get(ledger_id)
                if m.state == before and m.state != S.RETIRED:  # the step decided to wait
                    return m
        finally:
            _tick.reset(token)
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [self.lock, int(ledger_id)])

    def cleanup_due_run(self, cleanup: Step) -> list[int]:
        """Beat: the cleanup of every RETIRED ledger of this kind whose retention passed."""
        done = []
        for m in self.ledger.model.objects.filter(state=S.RETIRED, source_cleaned_at__isnull=True,
                                                  source_cleanup_after__lte=timezone.now()):
            cleanup(m, lambda _m: None)
            done.append(m.pk)
        return done
