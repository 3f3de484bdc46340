"""The drills `manage.py drill` and the test suite can run, as the apps register them
(`drill_register` in their AppConfig.ready)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from opsconsole.drills.scenarios import Drill

_DRILLS: dict[str, type[Drill]] = {}
# name -> the drill's class, in the order registered; a run makes its own instance (it keeps the run's
# injector). Read-only: register instead.
DRILLS: Mapping[str, type[Drill]] = MappingProxyType(_DRILLS)


def drill_register(drill: type[Drill]) -> type[Drill]:
    """Make `drill` runnable by its name."""
    _DRILLS[drill.name] = drill
    return drill
