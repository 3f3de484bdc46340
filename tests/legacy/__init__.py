"""Load the legacy database dumps (see README.md in this folder)."""

from __future__ import annotations

import gzip
from pathlib import Path

from django.db import connections

from likes_project.db_routers import COUNT_PARTITION, RELATION_SHARD, family_of_alias

HERE = Path(__file__).resolve().parent
DUMPS = {"default": "default.sql.gz", RELATION_SHARD: "relation_shard.sql.gz",
         COUNT_PARTITION: "count_partition.sql.gz"}


def dump_sql(family: str) -> str:
    return gzip.decompress((HERE / DUMPS[family]).read_bytes()).decode("utf-8")


def database_load(alias: str, connection=None) -> None:
    """Replace everything in `alias` (or in the psycopg `connection` given, for a database of that
    alias's family) with the legacy dump of its family."""
    sql = dump_sql(family_of_alias(alias))
    reset = "DROP SCHEMA public CASCADE; CREATE SCHEMA public;"
    if connection is not None:
        connection.execute(reset)
        connection.execute(sql)
        return
    with connections[alias].cursor() as cursor:
        cursor.execute(reset)
        cursor.execute(sql)
