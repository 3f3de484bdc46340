"""Create missing PostgreSQL databases for the configured aliases (when the role may)."""

from __future__ import annotations

import contextlib

import psycopg
from psycopg import sql


def _conninfo(cfg: dict, dbname: str) -> dict:
    info = {"dbname": dbname, "host": cfg.get("HOST") or None, "port": cfg.get("PORT") or None,
            "user": cfg.get("USER") or None, "password": cfg.get("PASSWORD") or None, "connect_timeout": 5}
    return {k: v for k, v in info.items() if v is not None}


def database_exists(cfg: dict) -> bool:
    try:
        with psycopg.connect(**_conninfo(cfg, cfg["NAME"])):
            return True
    except psycopg.OperationalError as exc:
        if "does not exist" in str(exc):
            return False
        raise


def database_create(cfg: dict) -> None:
    with psycopg.connect(**_conninfo(cfg, "postgres"), autocommit=True) as conn:
        # DuplicateDatabase: another process created it concurrently, which is what we wanted.
        with contextlib.suppress(psycopg.errors.DuplicateDatabase):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(cfg["NAME"])))
