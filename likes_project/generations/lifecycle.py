"""What a user of the lifecycle supplies (a `Lifecycle` with its steps) and what its steps see."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from likes_project.errors import Conflict
from likes_project.generations.models import GenerationModel


class RebuildFailed(Exception):
    """The rebuild cannot finish correctly (a verification mismatch, a pin that moved, an injected
    failure): its generation becomes FAILED and readers stay on the ACTIVE one."""


class FenceLost(RebuildFailed):
    """The generation row carries a newer lease token, or it is no longer building: someone else
    reclaimed it. This slice must stop writing."""


class RebuildTimedOut(RebuildFailed):
    """The run has been going for longer than its lifecycle's `time_limit_s` (counted from its start,
    across slices): it is stopped at its next chunk or tick, FAILED."""


class RebuildRunning(Conflict):
    code = "rebuild_running"
    default_message = "A rebuild is already running."

    def __init__(self, message: str | None = None, *, code: str | None = None, **extra):
        super().__init__(message, **extra)
        if code:
            self.code = code


@dataclass
class StepResult:
    """One chunk of a step: where the next chunk starts (`cursor`, JSON; None when the step is
    done), how many units it handled, and the step's total units when known."""

    cursor: dict | None
    done: int = 0
    total: int | None = None


def _no_tick() -> None:
    return None  # outside a slice (a step called by hand) there is no lease to renew


@dataclass
class StepContext:
    """What a step sees: its generation row, the run's parameters, the user's own persisted `state`
    (set in `create_fields` or by earlier steps), the `stats` counters that end up in the report, `say`
    for progress lines, and `tick`: a step whose one chunk is long work (a table streamed in, a replay to
    the stream heads, a whole-generation check) calls it as it goes, so the run's lease is renewed and
    its time limit checked within the chunk too (cheap: it does something at most once a second)."""

    lifecycle: Lifecycle
    row: GenerationModel
    params: dict
    state: dict
    stats: dict
    say: Callable[[str], None]
    tick: Callable[[], None] = _no_tick

    def count(self, name: str, n: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + n


class Lifecycle(ABC):
    """A user of the lifecycle. Subclasses set the class attributes and implement the steps; the
    engine calls them and owns everything else."""

    kind: str  # short name, e.g. "relcache": audit actions <kind>.rebuild_start / _activate / _failed / _abandoned
    model: type[GenerationModel]
    target_type: str  # audit target type of a generation
    label: str = "generation"  # how progress lines name a generation ("count cache generation 3")
    # Optional whole-number parameters of a run (chunk and sample sizes): each one given must be at
    # least 1, checked when the run starts, before anything is written.
    size_params: tuple[str, ...] = ()

    @property
    def time_limit_s(self) -> float | None:
        """How long a run may take from its start, all slices together, before it is FAILED (None: no
        limit of its own beyond the Celery time limit of each slice). A user reads its setting here."""
        return None

    @property
    def lease_resource(self) -> str:
        """One run of this lifecycle at a time holds this lease."""
        return f"generation:{self.kind}"

    @property
    def audit_prefix(self) -> str:
        return self.kind

    @property
    def running_code(self) -> str:
        return f"{self.kind}_rebuild_running"

    def create_fields(self, *, params: dict, previous: GenerationModel | None, state: dict) -> dict:
        """Extra column values of the new SHADOW row (called inside its creating transaction); may
        fill `state` for the steps. Raise a DomainError to refuse the run."""
        return {}

    def describe(self, row: GenerationModel) -> str:
        """What the first progress line of a run says about the new generation beyond its number,
        status and predecessor (its shape, what it is pinned to)."""
        return ""

    @abstractmethod
    def backfill(self, ctx: StepContext, cursor: dict | None) -> StepResult:
        """One chunk of copying the source into the generation, from `cursor` (None: the start)."""

    @abstractmethod
    def catch_up(self, ctx: StepContext, cursor: dict | None) -> StepResult:
        """One chunk of applying what changed in the source since the backfill started."""

    @abstractmethod
    def verify(self, ctx: StepContext) -> None:
        """Raise RebuildFailed when the generation does not hold what the source holds."""

    def switch(self, ctx: StepContext, activate: Callable[[], None]) -> None:
        """Switch the verified generation in. By default the engine's CAS alone: `activate()` makes it
        ACTIVE and the previous ACTIVE one RETIRED, audited, in one transaction on `default`. A user whose
        switch must also move something of its own under a fence (a restore: the count consumer's leases
        taken, its replay brought to the barrier, the count generation switched) overrides this and calls
        `activate()` inside its own transaction on `default`, so that both commit together or neither does.
        Raise RebuildFailed to refuse the switch."""
        activate()

    def release(self, row: GenerationModel) -> None:
        """Inside the transaction that ends a run without switching it in (FAILED, reclaimed, or a dry
        run's end): let go of what the run holds beside its own row (a restore's count generation)."""
        return None  # an optional hook: nothing by default

    def before_activate(self, row: GenerationModel, stats: dict) -> None:
        """Inside the switching transaction: raise RebuildFailed to refuse the switch (a pin moved), or
        record final columns of the row."""
        return None  # an optional hook: nothing by default

    def after_change(self, row: GenerationModel | None) -> None:
        """After a commit that changed a status: copy what the live writers consult (a Redis
        registry). Must tolerate its store being down; the next slice calls it again."""
        return None  # an optional hook: nothing by default

    def after_activate(self, row: GenerationModel) -> None:
        """After the switch committed (mark the new generation's content whole)."""
        return None  # an optional hook: nothing by default

    def report(self, row: GenerationModel):
        return row
