"""The import graph of the project, written as tests that fail.

1. The layers import in one direction only (house style, "Layers"):

    likes_project (core) <- relations <- counting <- reconciliation <- opsconsole

   An app may import only the apps to its left (and itself). The wiring files (URLs, settings, the Celery
   app, WSGI) are exempt: they name every app on purpose.

2. No two modules of the project import each other, directly or round a longer loop (issue 29 §3): the
   graph of every module of the apps and the core (migrations, tests and bench excluded; the wiring files
   included) has no strongly connected component of more than one module.

Both read the graph from the source, every `import` and `from ... import` anywhere in a file (inside
functions, and under `if TYPE_CHECKING:` too), so a late import cannot hide an edge. An edge goes to the
module an import names, resolved against the project's files:

- `import a.b` -> a.b; `from a.b import c` -> a.b.c when that is a module, else a.b (a name defined in
  a.b, or re-exported by the package `a/b/__init__.py`: then the edge goes to that `__init__`, which does
  run first, so a submodule that takes a name from its own package's `__init__` while that `__init__`
  imports the submodule is a real cycle);
- relative imports are resolved against the importing module (a package's `__init__` is its package);
- the parent packages that Python initialises on the way to a module are not edges. Every module would
  otherwise import its package's `__init__`, and a package that gathers its submodules' names in its
  `__init__` (a common, harmless shape) would be in a cycle with each of them.
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


def module_name(path: str) -> str:
    """`a/b/c.py` -> a.b.c; `a/b/__init__.py` -> a.b."""
    return path[:-3].replace("/", ".").removesuffix(".__init__")


def imports_of(source: str, module: str, *, package: bool = False) -> set[str]:
    """The dotted name every import statement in `source` reaches, relative imports resolved against
    `module` (itself a package when `package`): `import a.b` gives a.b, `from a import b, c` gives a.b
    and a.c (which `resolve` maps to the module each names)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + (1 if package else 0)]
                base = ".".join([*parts, node.module] if node.module else parts)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def resolve(name: str, modules: set[str]) -> str | None:
    """The module of `modules` that `name` refers to: itself, or the nearest enclosing one (a.b.Name ->
    a.b); None outside the project."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def module_graph(files: dict[str, str]) -> dict[str, set[str]]:
    """module -> the project modules it imports, for `files` ({relative path: source})."""
    modules = {module_name(path) for path in files}
    graph = {}
    for path, source in files.items():
        module = module_name(path)
        names = imports_of(source, module, package=path.endswith("/__init__.py"))
        graph[module] = {m for m in (resolve(n, modules) for n in names) if m is not None and m != module}
    return graph


def project_files(*, wiring: bool, migrations: bool) -> dict[str, str]:
    files = {}
    for top in LAYERS:
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if not wiring and (rel in WIRING or rel.startswith(WIRING_DIRS)):
                continue
            if not migrations and "/migrations/" in rel:
                continue
            files[rel] = path.read_text()
    return files


# --- 1. the layers ---------------------------------------------------------------------------------


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
    assert violations(module_graph(project_files(wiring=False, migrations=True))) == []


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
    assert imports_of(source, "relations.services.x") == {
        "counting.routing", "relations.services.models.X", "opsconsole.sites"}
    # In a package's __init__, `.` is the package itself.
    assert imports_of("from . import a\nfrom ..b import c\n", "p.q", package=True) == {"p.q.a", "p.b.c"}


# --- 2. no import cycle ----------------------------------------------------------------------------


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative: the
    project's import chains are deeper than a comfortable recursion), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest loop through the first module of `component`, back to it (breadth first inside it)."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every import cycle: each strongly connected component, with one loop through it spelled out."""
    return [f"{len(c)} modules ({', '.join(c)}), e.g. {' -> '.join(a_cycle(graph, c))}"
            for c in strongly_connected(graph)]


def test_no_module_imports_itself_round_a_cycle():
    graph = module_graph(project_files(wiring=True, migrations=False))
    assert len(graph) > 250  # the walk found the project (some 300 modules)
    assert cycles(graph) == []


def test_the_cycle_check_reports_a_cycle():
    graph = {
        "a": {"b"}, "b": {"c"}, "c": {"a", "d"},  # a loop of three
        "d": {"e"}, "e": {"d"},  # and a loop of two beside it
        "f": {"a", "d"},  # imports both loops, in neither
    }
    assert cycles(graph) == ["3 modules (a, b, c), e.g. a -> b -> c -> a", "2 modules (d, e), e.g. d -> e -> d"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_cycle_check_sees_late_imports_and_the_package_init():
    files = {
        # A package whose __init__ gathers its submodules, and a submodule that imports a sibling
        # through the package: not a cycle (the edge goes to the sibling, not to the __init__).
        "pkg/__init__.py": "from pkg.run import go\nfrom pkg.steps import STEPS\n",
        "pkg/steps.py": "from pkg import util\nSTEPS = []\n",
        "pkg/util.py": "",
        "pkg/run.py": "from pkg.steps import STEPS\n",
    }
    assert cycles(module_graph(files)) == []
    # A name taken from the package's __init__, inside a function: that __init__ imports run, a cycle.
    files["pkg/util.py"] = "def f():\n    from pkg import go\n"
    assert cycles(module_graph(files)) == [
        "4 modules (pkg, pkg.run, pkg.steps, pkg.util), e.g. pkg -> pkg.steps -> pkg.util -> pkg"]
    # A relative import in a package's __init__ names its own submodule.
    assert module_graph({"p/__init__.py": "from . import m\n", "p/m.py": ""})["p"] == {"p.m"}
