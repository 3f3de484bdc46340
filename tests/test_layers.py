"""The layers import in one direction only (house style, "Layers"):

    likes_project (core) <- relations <- counting <- reconciliation <- opsconsole

An app may import only the apps to its left (and itself). The wiring files (URLs, settings, the Celery
app, WSGI) are exempt: they name every app on purpose. The test reads the import graph from the source
(every `import` and `from ... import`, also inside functions), so a late import cannot hide an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.topology_independent

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["likes_project", "relations", "counting", "reconciliation", "opsconsole"]
WIRING = {"likes_project/urls.py", "likes_project/celery.py", "likes_project/wsgi.py", "manage.py"}
WIRING_DIRS = ("likes_project/settings/",)


def layer_of(module: str) -> int | None:
    top = module.split(".", 1)[0]
    return LAYERS.index(top) if top in LAYERS else None


def imports_of(source: str, module: str) -> set[str]:
    """Every module named by an import statement in `source` (relative imports resolved)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level]
                found.add(".".join([*base, node.module] if node.module else base))
            elif node.module:
                found.add(node.module)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports, for every non-wiring module of every layer."""
    graph = {}
    for top in LAYERS:
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel in WIRING or rel.startswith(WIRING_DIRS):
                continue
            module = rel[:-3].replace("/", ".").removesuffix(".__init__")
            graph[module] = {m for m in imports_of(path.read_text(), module) if layer_of(m) is not None}
    return graph


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every edge from a layer to a layer to its right."""
    bad = []
    for module, imported in sorted(graph.items()):
        here = layer_of(module)
        for target in sorted(imported):
            if here is not None and layer_of(target) > here:
                bad.append(f"{module} imports {target} ({LAYERS[here]} may not import {LAYERS[layer_of(target)]})")
    return bad


def test_imports_follow_the_layers():
    assert violations(import_graph()) == []


def test_the_layer_check_catches_a_forbidden_import():
    graph = {
        "relations.services.commands": {"likes_project.errors", "relations.routing"},  # left and self: fine
        "counting.services.projection": {"relations.events"},  # counting may import relations
        "relations.services.outbox": {"counting.routing"},  # relations may not import counting
        "likes_project.audit.services": {"opsconsole.sites"},  # the core may not import the console
        "opsconsole.sites": {"counting.selectors", "likes_project.admin_kit"},  # the top may import all
    }
    assert violations(graph) == [
        "likes_project.audit.services imports opsconsole.sites (likes_project may not import opsconsole)",
        "relations.services.outbox imports counting.routing (relations may not import counting)",
    ]


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    source = "def f():\n    from counting import routing\nfrom .models import X\nimport opsconsole.sites\n"
    assert imports_of(source, "relations.services.x") == {"counting", "relations.services.models", "opsconsole.sites"}
