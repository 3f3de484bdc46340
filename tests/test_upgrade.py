"""Databases created by the landed migrations (before the squash of D133) migrate forward in place, to exactly
the schema a fresh database gets (tables, indexes, constraints, triggers, functions, sequences), keeping their
data and their permission grants, and running nothing: the squashed migrations are recorded as applied.

Two scratch database sets are built by the real `manage.py migrate_all` in a subprocess: one from nothing,
one from the legacy dumps (tests/legacy) with rows a running deployment would hold. (The whole suite also
runs on upgraded databases: `LIKES_TEST_DATABASES=upgraded`, which `scripts/test.sh` runs as its second pass.)
"""

from __future__ import annotations

import re
import subprocess
import sys

import psycopg
import pytest
from django.conf import settings
from django.db import connections

from tests import drills, legacy

pytestmark = [pytest.mark.topology_independent, pytest.mark.schema]

ALIASES = ["default", *settings.RELATION_SHARD_ALIASES, *settings.COUNT_PARTITION_ALIASES]


def _names(tag: str) -> dict[str, str]:
    base = connections["default"].settings_dict["NAME"]
    return {alias: f"{base}_{tag}_{alias}" for alias in ALIASES}


def _conninfo(name: str) -> dict:
    cfg = connections["default"].settings_dict
    info = {"dbname": name, "host": cfg.get("HOST") or "127.0.0.1", "port": cfg.get("PORT") or 5432,
            "user": cfg.get("USER") or None, "password": cfg.get("PASSWORD") or None}
    return {k: v for k, v in info.items() if v is not None}


def _recreate(names: dict[str, str], *, create: bool) -> None:
    with psycopg.connect(**_conninfo("postgres"), autocommit=True) as conn:
        for name in names.values():
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            if create:
                conn.execute(f'CREATE DATABASE "{name}"')


def _migrate_all(names: dict[str, str]) -> str:
    url = {a: drills._url("default").rsplit("/", 1)[0] + "/" + n for a, n in names.items()}
    env = drills.service_env(
        DATABASE_URL=url["default"],
        RELATION_SHARD_URLS=",".join(url[a] for a in settings.RELATION_SHARD_ALIASES),
        COUNT_PARTITION_URLS=",".join(url[a] for a in settings.COUNT_PARTITION_ALIASES),
    )
    done = subprocess.run([sys.executable, "manage.py", "migrate_all"], cwd=drills.ROOT, env=env, text=True,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


LEGACY_ROWS = """
INSERT INTO auth_user (id, password, is_superuser, username, first_name, last_name, email, is_staff, is_active,
                       date_joined) VALUES (900, '!', false, 'legacy-op', '', '', '', true, true, now());
INSERT INTO auth_user_groups (user_id, group_id) SELECT 900, id FROM auth_group WHERE name = 'likes-operator';
INSERT INTO auth_user_user_permissions (user_id, permission_id)
SELECT 900, p.id FROM auth_permission p JOIN django_content_type c ON c.id = p.content_type_id
 WHERE (c.app_label, p.codename) IN (('relations', 'export_video_likers'), ('counting', 'approve_bucketmigration'));
INSERT INTO opsconsole_auditrecord (at, actor, channel, action, target_type, target_id, params, outcome)
VALUES (now(), 'legacy-op', 'cli', 'relcache.rebuild', 'cache_generation', '2', '{}', 'active');
"""
LEGACY_SHARD_ROWS = """
INSERT INTO relations_likerelation (user_id, video_id, state, relation_version, last_operation_id, state_changed_at,
       created_at, updated_at) VALUES (7, 'legacy-v', 'LIKED', 3, 'op-3', now(), now(), now());
"""
LEGACY_PARTITION_ROWS = """
INSERT INTO counting_videolikecountvbucket (generation, video_id, virtual_bucket, bucket_space_version, active_count,
       bucket_version, frozen, updated_at) VALUES (1, 'legacy-v', 5, 1, 1, 1, false, now());
"""
# The squashed migrations (one an app): the upgrade records them, a fresh database runs them.
SQUASHED = {"relations.0001_squashed_0019", "counting.0001_squashed_0008", "notifications.0001_squashed_0003",
            "risk.0001_squashed_0004", "audit.0001_squashed_0005", "eventlog.0001_squashed_0006",
            "subscriptions.0001_squashed_0004", "opsconsole.0001_squashed_0005", "reconciliation.0001_squashed_0006"}

CATALOG = """
SELECT 'column', table_name || '.' || column_name,
       concat_ws(' ', data_type, character_maximum_length, is_nullable, column_default, is_identity)
  FROM information_schema.columns WHERE table_schema = 'public'
UNION ALL
SELECT 'index', indexname, regexp_replace(indexdef, ' ON public\\.', ' ON ') FROM pg_indexes WHERE schemaname = 'public'
UNION ALL
SELECT 'constraint', conrelid::regclass::text || '.' || conname, contype::text || ' ' || pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = 'public'::regnamespace
UNION ALL
SELECT 'trigger', tgrelid::regclass::text || '.' || tgname,
       pg_get_triggerdef(oid) || ' ' || coalesce(obj_description(oid, 'pg_trigger'), '')
  FROM pg_trigger WHERE NOT tgisinternal
UNION ALL
SELECT 'function', oid::regprocedure::text, pg_get_functiondef(oid) FROM pg_proc
 WHERE pronamespace = 'public'::regnamespace
UNION ALL
SELECT 'sequence', sequencename, concat_ws(' ', data_type, increment_by) FROM pg_sequences WHERE schemaname = 'public'
"""


def _catalog(name: str) -> list[tuple]:
    """The schema, with each definition normalised: a dump and restore re-prints CHECK expressions with
    other (equivalent) casts and parentheses, which is not a difference of the migrations."""
    def norm(text: str) -> str:
        return re.sub(r"[()\s]", "", re.sub(r"::[a-z ]+(\[\])?", "", text or ""))

    return sorted((kind, what, norm(definition)) for kind, what, definition in _query(name, CATALOG))


def _query(name: str, sql: str) -> list[tuple]:
    with psycopg.connect(**_conninfo(name)) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture(scope="module")
def database_sets(django_db_blocker):
    with django_db_blocker.unblock():
        fresh, upgraded = _names("fresh"), _names("upgraded")
        _recreate(fresh, create=False)  # migrate_all creates them, as on a new machine
        _recreate(upgraded, create=True)
        rows = {"default": LEGACY_ROWS, settings.RELATION_SHARD_ALIASES[0]: LEGACY_SHARD_ROWS,
                settings.COUNT_PARTITION_ALIASES[0]: LEGACY_PARTITION_ROWS}
        for alias, name in upgraded.items():
            with psycopg.connect(**_conninfo(name), autocommit=True) as conn:
                legacy.database_load(alias, conn)
                if alias in rows:
                    conn.execute(rows[alias])
        _migrate_all(fresh)
        _migrate_all(upgraded)  # had it run a squashed migration, its first CreateModel would have failed
        yield fresh, upgraded
        _recreate(fresh, create=False)
        _recreate(upgraded, create=False)


@pytest.mark.parametrize("alias", ALIASES)
def test_an_upgraded_database_has_exactly_the_schema_of_a_fresh_one(database_sets, alias):
    fresh, upgraded = database_sets
    assert _catalog(upgraded[alias]) == _catalog(fresh[alias])


def test_the_upgrade_keeps_the_data_and_runs_none_of_the_squashed_migrations(database_sets):
    _fresh, upgraded = database_sets
    assert _query(upgraded["default"], "SELECT actor, action FROM opsconsole_auditrecord") == [
        ("legacy-op", "relcache.rebuild")]
    assert _query(upgraded[settings.RELATION_SHARD_ALIASES[0]],
                  "SELECT video_id, user_id, state, relation_version FROM relations_likerelation") == [
        ("legacy-v", 7, "LIKED", 3)]
    assert _query(upgraded[settings.COUNT_PARTITION_ALIASES[0]],
                  "SELECT video_id, virtual_bucket, active_count FROM counting_videolikecountvbucket") == [
        ("legacy-v", 5, 1)]
    for alias, name in upgraded.items():
        applied = {r[0] for r in _query(name, "SELECT app || '.' || name FROM django_migrations")}
        assert applied >= SQUASHED, alias  # recorded, as Django does once every replaced migration is applied
        assert "relations.0019_video_published_at" in applied  # the landed history stays on record


def test_the_upgrade_keeps_every_permission_grant_and_the_roles_are_those_of_a_fresh_database(database_sets):
    fresh, upgraded = database_sets
    granted = {r[0] for r in _query(upgraded["default"], """
        SELECT c.app_label || '.' || p.codename FROM auth_user_user_permissions up
          JOIN auth_permission p ON p.id = up.permission_id JOIN django_content_type c ON c.id = p.content_type_id
         WHERE up.user_id = 900""")}
    assert granted == {"relations.export_video_likers", "counting.approve_bucketmigration"}
    assert _query(upgraded["default"], "SELECT g.name FROM auth_user_groups ug JOIN auth_group g ON g.id = "
                                       "ug.group_id WHERE ug.user_id = 900") == [("likes-operator",)]
    roles = """SELECT g.name, c.app_label, c.model, p.codename, p.name FROM auth_group g
                 JOIN auth_group_permissions gp ON gp.group_id = g.id JOIN auth_permission p ON p.id = gp.permission_id
                 JOIN django_content_type c ON c.id = p.content_type_id ORDER BY 1, 2, 3, 4"""
    permissions = """SELECT c.app_label, c.model, p.codename, p.name FROM auth_permission p
                       JOIN django_content_type c ON c.id = p.content_type_id ORDER BY 1, 2, 3"""
    for sql in (roles, permissions):
        assert _query(upgraded["default"], sql) == _query(fresh["default"], sql)
