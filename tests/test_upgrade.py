"""Databases created by the landed (pre-layers) migrations migrate forward in place, to exactly the
schema a fresh database gets, keeping their data and their permission grants.

Two scratch database sets are built by the real `manage.py migrate_all` in a subprocess: one from
nothing, one from the legacy dumps (tests/legacy) with rows a running deployment would hold, among them
rebuilds that were in flight at the upgrade. (The whole suite also runs on upgraded databases:
`LIKES_TEST_DATABASES=upgraded`, which `scripts/test.sh` runs as its second pass.)
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
INSERT INTO auth_user_user_permissions (user_id, permission_id)
SELECT 900, p.id FROM auth_permission p JOIN django_content_type c ON c.id = p.content_type_id
 WHERE (c.app_label, c.model, p.codename) IN (('relations', 'cachegeneration', 'change_cachegeneration'),
       ('relations', 'cachegeneration', 'view_cachegeneration'),
       ('opsconsole', 'auditrecord', 'view_relation_lookup'), ('opsconsole', 'auditrecord', 'view_auditrecord'),
       ('relations', 'reverseindexgeneration', 'change_reverseindexgeneration'));
INSERT INTO relations_cachegeneration (generation, status, baseline_watermark, created_at, failure_reason)
VALUES (2, 'REBUILDING', '{}', now(), '');
INSERT INTO counting_countcachegeneration (generation, status, projection_generation, route_manifest_id,
       build_from, start_checkpoints, rows_written, started_by, failure_reason, started_at)
VALUES (2, 'REBUILDING', 1, 1, now(), '{}', 0, 'legacy', '', now());
INSERT INTO relations_reverseindexgeneration (generation, status, hash_algorithm, hash_seed, user_id_encoding,
       shards, placement, created_at, failure_reason)
VALUES (2, 'SHADOW', 'sha256-be64', 'likes-reverse-v1', 'decimal-ascii-v1', 4, '["cnt_00","cnt_01","cnt_00","cnt_01"]',
        now(), '');
INSERT INTO opsconsole_auditrecord (at, actor, channel, action, target_type, target_id, params, outcome)
VALUES (now(), 'legacy-op', 'cli', 'relcache.rebuild', 'cache_generation', '2', '{}', 'active');
INSERT INTO django_celery_beat_intervalschedule (id, every, period) VALUES (900, 1, 'seconds');
INSERT INTO django_celery_beat_periodictask (name, task, args, kwargs, queue, exchange, routing_key, expires,
       enabled, last_run_at, total_run_count, date_changed, description, interval_id, one_off, start_time,
       priority, headers, expire_seconds)
VALUES ('project-reverse-index', 'relations.project_reverse_all', '[]', '{}', NULL, NULL, NULL, NULL, true, NULL, 0,
        now(), '', 900, false, NULL, NULL, '{}', NULL);
"""
LEGACY_REVERSE_ROWS = """
INSERT INTO relations_likereverseprojection (generation, video_id, user_id, relation_version, state, liked_at,
       reverse_shard, updated_at) VALUES (1, 'legacy-v', 7, 3, 'LIKED', now(), 0, now());
INSERT INTO relations_likereversesort (generation, video_id, reverse_shard, liked_at, user_id)
SELECT generation, video_id, reverse_shard, liked_at, user_id FROM relations_likereverseprojection;
"""

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
SELECT 'trigger', tgrelid::regclass::text || '.' || tgname, pg_get_triggerdef(oid)
  FROM pg_trigger WHERE NOT tgisinternal
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
        for alias, name in upgraded.items():
            with psycopg.connect(**_conninfo(name), autocommit=True) as conn:
                legacy.database_load(alias, conn)
                if alias == "default":
                    conn.execute(LEGACY_ROWS)
                elif alias == settings.COUNT_PARTITION_ALIASES[0]:
                    conn.execute(LEGACY_REVERSE_ROWS)
        _migrate_all(fresh)
        _migrate_all(upgraded)
        yield fresh, upgraded
        _recreate(fresh, create=False)
        _recreate(upgraded, create=False)


@pytest.mark.parametrize("alias", ALIASES)
def test_an_upgraded_database_has_exactly_the_schema_of_a_fresh_one(database_sets, alias):
    fresh, upgraded = database_sets
    assert _catalog(upgraded[alias]) == _catalog(fresh[alias])


def test_the_upgrade_keeps_the_data_and_fails_the_rebuilds_it_interrupted(database_sets):
    _fresh, upgraded = database_sets
    default = upgraded["default"]
    assert _query(default, "SELECT status, left(failure_reason, 9) FROM relations_cachegeneration "
                           "WHERE generation = 2") == [("FAILED", "abandoned")]
    assert _query(default, "SELECT status FROM counting_countcachegeneration WHERE generation = 2") == [("FAILED",)]
    # a SHADOW reverse generation is a building state of the lifecycle: the next start reclaims it
    assert _query(default, "SELECT status, job_id FROM relations_reverseindexgeneration WHERE generation = 2") == [
        ("SHADOW", None)]
    assert _query(default, "SELECT actor, action, job_id FROM opsconsole_auditrecord") == [
        ("legacy-op", "relcache.rebuild", None)]
    assert _query(default, "SELECT count(*) FROM django_celery_beat_periodictask "
                           "WHERE task = 'relations.project_reverse_all'") == [(0,)]
    partition = upgraded[settings.COUNT_PARTITION_ALIASES[0]]
    assert _query(partition, "SELECT video_id, user_id, state FROM relations_likereverseprojection") == [
        ("legacy-v", 7, "LIKED")]
    applied = {r[0] for r in _query(default, "SELECT app || '.' || name FROM django_migrations")}
    assert {"relations.0001_initial", "relations.0001_history", "relations.0007_layers_and_lifecycle",
            "counting.0001_history", "counting.0003_reverse_index_and_lifecycle", "audit.0001_initial",
            "audit.0002_append_only"} <= applied
    # ... and the legacy audit row is now behind the append-only trigger (D49)
    assert _query(default, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'opsconsole_auditrecord'::regclass "
                           "AND tgname LIKE 'pgtrigger_audit_append_only%'") == [(1,)]


def test_the_upgrade_keeps_every_permission_grant(database_sets):
    _fresh, upgraded = database_sets
    granted = {r[0] for r in _query(upgraded["default"], """
        SELECT c.app_label || '.' || p.codename FROM auth_user_user_permissions up
          JOIN auth_permission p ON p.id = up.permission_id JOIN django_content_type c ON c.id = p.content_type_id
         WHERE up.user_id = 900""")}
    assert granted == {
        "relations.change_relationcachegeneration", "relations.view_relationcachegeneration",
        "relations.rebuild_relation_cache",  # given to whoever could change the generations
        "opsconsole.view_relation_lookup",  # the console's permission keeps its name
        "audit.view_auditrecord",  # the audit log's grants follow the model
        "counting.change_reverseindexgeneration", "counting.rebuild_reverse_index",
    }
