"""The test databases, cloned from migrated templates instead of migrated one by one (issue 28, D100).

Migrating a database set is most of a test process's setup: about 9 s of CPU for six databases on this machine,
paid by every pytest-xdist worker of every pass of `scripts/test.sh`, and by every `./scripts/test.sh tests/x`.
A database of one family (control plane, relation shard, count partition) is built the same way on every alias
of that family, so one database per family and server is migrated into a template, and every worker's test
database is a `CREATE DATABASE ... TEMPLATE` of it (a fraction of a second).

A template's name carries a digest of everything the migrations build from (`template_digest`): the migration
modules, the SQL files they load, the kit and router they use, the models post_migrate reads, the legacy dumps
of the upgraded kind, and Django's version. Whatever changes, the name changes and a new template is built; a
template is never altered in place, and one is only ever read once it is complete (it is built under another
name and renamed). Templates stay on the server for the next run, like `--reuse-db` but never stale; those of
another digest are dropped once a day old. The first process that needs a missing template builds it while the
others wait on a file lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import django
from django.conf import settings
from django.core.management import call_command
from django.db import connections

from likes_project.db_routers import COUNT_PARTITION, RELATION_SHARD, family_of_alias

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "likes_test_tpl"
FAMILY_CODES = {"default": "def", RELATION_SHARD: "rel", COUNT_PARTITION: "cnt"}
STALE_AFTER_S = 24 * 3600
# What a migrated database depends on, besides the migrations themselves (globs under the checkout).
SOURCES = ("*/migrations/*.py", "*/*/migrations/*.py", "*/sql/*.sql", "*/*/sql/*.sql", "*/models.py",
           "*/models/*.py", "*/*/models.py", "likes_project/migration_kit.py", "likes_project/db_routers.py")


def template_digest(kind: str) -> str:
    """A digest of what a template of `kind` ("fresh", or "upgraded": the legacy dumps migrated forward) holds."""
    digest = hashlib.sha256(f"{kind}\0{django.get_version()}\0".encode())
    patterns = SOURCES + (("tests/legacy/*.sql.gz",) if kind == "upgraded" else ())
    files = sorted({path for pattern in patterns for path in ROOT.glob(pattern) if ".venv" not in path.parts})
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def setup(kind: str) -> dict[str, str]:
    """Create every alias's test database (the name pytest-django gave it, per worker) from its family's
    template, building the template first where this server has none. Returns alias -> the database name
    the settings had before, for `teardown`."""
    digest = template_digest(kind)
    old_names = {}
    for alias in connections:
        connection = connections[alias]
        template = template_ensure(alias, kind=kind, digest=digest)
        creation = connection.creation
        test_name = creation._get_test_db_name()
        connection.settings_dict["TEST"]["TEMPLATE"] = template
        creation._create_test_db(verbosity=0, autoclobber=True, keepdb=False)  # CREATE DATABASE ... TEMPLATE
        old_names[alias] = connection.settings_dict["NAME"]
        _point(alias, test_name)
    return old_names


def teardown(old_names: dict[str, str]) -> None:
    """Drop the test databases `setup` created (the templates stay)."""
    for alias, old_name in old_names.items():
        connections[alias].creation.destroy_test_db(old_name, verbosity=0)


def template_ensure(alias: str, *, kind: str, digest: str) -> str:
    """The name of the template for `alias`'s family on `alias`'s server, built now if missing."""
    name = f"{PREFIX}_{FAMILY_CODES[family_of_alias(alias)]}_{kind[0]}_{digest}"
    with _server_lock(alias, name):
        if not _exists(alias, name):
            _build(alias, name, kind=kind)
            _drop_stale(alias, keep=name)
    return name


def _build(alias: str, name: str, *, kind: str) -> None:
    from tests import legacy

    building = name + "_b"
    connection = connections[alias]
    saved = connection.settings_dict["NAME"]
    _execute(alias, f'DROP DATABASE IF EXISTS "{building}"', f'CREATE DATABASE "{building}"')
    _point(alias, building)
    try:
        if kind == "upgraded":
            legacy.database_load(alias)  # the databases as the landed code created them ...
        call_command("migrate", database=alias, run_syncdb=True, interactive=False, verbosity=0)  # ... migrated
    finally:
        connection.close()
        _point(alias, saved)
    _execute(alias, f'ALTER DATABASE "{building}" RENAME TO "{name}"',
             f"COMMENT ON DATABASE \"{name}\" IS '{int(time.time())}'")


def _drop_stale(alias: str, *, keep: str) -> None:
    """Drop this family's templates of other digests built more than a day ago (another checkout's may be
    in use now; a day-old one is not worth keeping)."""
    family = keep.rsplit("_", 1)[0]  # likes_test_tpl_<family>_<kind>
    with connections[alias]._nodb_cursor() as cursor:
        cursor.execute("SELECT d.datname, shobj_description(d.oid, 'pg_database') FROM pg_database d "
                       "WHERE d.datname LIKE %s AND d.datname <> %s", [family + "\\_%", keep])
        stale = [row[0] for row in cursor.fetchall()
                 if not (row[1] or "").isdigit() or time.time() - int(row[1]) > STALE_AFTER_S]
    for old in stale:
        with contextlib.suppress(Exception):  # in use by a run of that digest: its turn comes later
            _execute(alias, f'DROP DATABASE IF EXISTS "{old}"')


def _point(alias: str, name: str) -> None:
    connections[alias].close()
    settings.DATABASES[alias]["NAME"] = name
    connections[alias].settings_dict["NAME"] = name


def _exists(alias: str, name: str) -> bool:
    with connections[alias]._nodb_cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        return cursor.fetchone() is not None


def _execute(alias: str, *statements: str) -> None:
    with connections[alias]._nodb_cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


@contextlib.contextmanager
def _server_lock(alias: str, name: str) -> Iterator[None]:
    """One builder per template and server, across every process of this machine."""
    cfg = connections[alias].settings_dict
    key = hashlib.sha1(f"{cfg['HOST']}:{cfg['PORT']}/{name}".encode()).hexdigest()[:16]
    with open(os.path.join(tempfile.gettempdir(), f"likes-test-template-{key}.lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
