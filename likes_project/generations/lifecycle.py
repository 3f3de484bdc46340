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


@dataclass
class StepContext:
    """What a step sees: its generation row, the run's parameters, the user's own persisted `state`
    (set in `create_fields` or by earlier steps), the `stats` counters that end up in the report, and
    `say` for progress lines."""

    lifecycle: Lifecycle
    row: GenerationModel
    params: dict
    state: dict
    stats: dict
    say: Callable[[str], None]

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
