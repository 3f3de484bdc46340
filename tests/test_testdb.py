"""The suite's own database machinery (D100): the template digest that decides when a template is rebuilt
(tests/testdb.py), and the flush that puts back the session setup's rows (tests/flush.py), each with the
counter-example that shows the test can fail."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.color import no_style
from django.db import connections

from relations.models import RelationCacheGeneration, RelationShardContract
from tests import flush, testdb


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A checkout of three files a template is built from."""
    for path, text in {"app/migrations/0001_initial.py": "ops = 1\n", "app/sql/f.v1.sql": "SELECT 1;\n",
                       "tests/legacy/default.sql.gz": "dump"}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.setattr(testdb, "ROOT", tmp_path)
    return tmp_path


@pytest.mark.topology_independent
@pytest.mark.parametrize("changed", ["app/migrations/0001_initial.py", "app/sql/f.v1.sql"])
def test_a_template_digest_changes_with_anything_the_migrations_build_from(tree, changed):
    before = {kind: testdb.template_digest(kind) for kind in ("fresh", "upgraded")}
    (tree / changed).write_text("changed\n")
    after = {kind: testdb.template_digest(kind) for kind in ("fresh", "upgraded")}
    assert all(after[kind] != before[kind] for kind in before)


@pytest.mark.topology_independent
def test_a_legacy_dump_changes_only_the_upgraded_templates(tree):
    before = {kind: testdb.template_digest(kind) for kind in ("fresh", "upgraded")}
    (tree / "tests/legacy/default.sql.gz").write_text("another dump")
    assert testdb.template_digest("fresh") == before["fresh"]
    assert testdb.template_digest("upgraded") != before["upgraded"]
    assert before["fresh"] != before["upgraded"]


def _flush_every_database() -> None:
    """What a transactional test's teardown runs on each database (Django's flush, with tests/flush.py's SQL)."""
    for alias in connections:
        connection = connections[alias]
        tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
        connection.ops.execute_sql_flush(connection.ops.sql_flush(no_style(), tables))


@pytest.mark.topology
@pytest.mark.django_db(databases="__all__", transaction=True)
@pytest.mark.parametrize("seeded", [True, False], ids=["the flush", "counter-example: no seed"])
def test_a_flush_leaves_what_the_setup_left_and_nothing_a_test_wrote(seeded, monkeypatch):
    contract = RelationShardContract.objects.get()
    group = Group.objects.get(name="likes-operator").pk  # a migration's row
    RelationCacheGeneration.objects.all().delete()
    Group.objects.filter(pk=group).delete()
    get_user_model().objects.create_user("written-by-the-test")
    if not seeded:
        monkeypatch.setattr(flush, "_seeded", {})
    _flush_every_database()
    assert not get_user_model().objects.exists()
    restored = (Group.objects.filter(pk=group, name="likes-operator").exists(),
                RelationShardContract.objects.filter(pk=contract.pk).exists(),
                RelationCacheGeneration.objects.filter(status="ACTIVE").exists())
    assert restored == ((True, True, True) if seeded else (False, False, False))
