"""Project-wide guards: migrations match the models, the OpenAPI schema is valid, and no side
effect is lexically inside a transaction (consistency-techniques T5)."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.topology_independent

ROOT = Path(__file__).resolve().parent.parent
APPS = ["likes_project", "relations", "counting", "reconciliation", "opsconsole"]
# Calls that must never run inside `transaction.atomic()`: task enqueues and Redis traffic.
FORBIDDEN_IN_ATOMIC = {"delay", "apply_async", "send_task", "cache_redis", "stream_redis",
                       "visibility_cache_put", "visibility_cache_put_many", "edge_cache_put", "edge_cache_put_many",
                       "edge_cache_invalidate", "token_bucket", "relation_cache_write", "floors_to_redis",
                       "relation_transition_record", "nudge", "views_write", "publish_pipeline"}


@pytest.mark.django_db(databases="__all__")
def test_migrations_are_complete():
    out = io.StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_every_model_is_named_in_english_in_the_console():
    """The console's sidebar once said "Count refresh switchs" and "Account statuss" (issue 32 §4): a plural that
    is the singular plus "s" after s, ch, sh, x or a consonant-y is Django's default, and wrong."""
    import re

    from django.apps import apps

    wrong = [f"{m._meta.label}: {m._meta.verbose_name_plural}" for m in apps.get_models()
             if str(m._meta.verbose_name_plural) == f"{m._meta.verbose_name}s"
             and re.search(r"(s|ch|sh|x|[^aeiou]y)$", str(m._meta.verbose_name))]
    assert not wrong


def test_openapi_schema_validates_without_warnings():
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=io.StringIO())


def _is_atomic(item: ast.withitem) -> bool:
    call = item.context_expr
    return isinstance(call, ast.Call) and getattr(call.func, "attr", getattr(call.func, "id", "")) == "atomic"


def _called_names(node: ast.AST):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            name = getattr(sub.func, "attr", None) or getattr(sub.func, "id", None)
            if name:
                yield name, sub.lineno


def _violations(source: str, path: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.With) and any(_is_atomic(i) for i in node.items):
            for stmt in node.body:
                for name, line in _called_names(stmt):
                    if name in FORBIDDEN_IN_ATOMIC:
                        found.append(f"{path}:{line} {name}() inside transaction.atomic()")
    return found


def test_no_side_effects_inside_atomic_blocks():
    found = []
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" not in path.parts:
                found += _violations(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []


def test_the_side_effect_guard_catches_a_violation():
    bad = "from django.db import transaction\nwith transaction.atomic(using='x'):\n    task.delay(1)\n"
    assert _violations(bad, "bad.py") == ["bad.py:3 delay() inside transaction.atomic()"]


MAX_MODULE_LINES = 500  # issue 29: a module longer than this is split by concern (migrations excepted)


def test_no_module_outside_migrations_is_over_500_lines():
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    long = {p: n for p in tracked if "/migrations/" not in p and (ROOT / p).exists()
            and (n := len((ROOT / p).read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"split these by concern: {long}"
