"""Database aliases: `default` (control plane), relation shards and count partitions.

Only this module turns environment variables into aliases. Which alias a key lives on is decided by
`relations.routing` / `counting.routing`; which alias family a model belongs to by `db_routers`.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import dj_database_url

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/likes"

# Guard rails for every connection (consistency-techniques T4). Values in milliseconds.
STATEMENT_TIMEOUT_MS = int(os.environ.get("DB_STATEMENT_TIMEOUT_MS", "5000"))
LOCK_TIMEOUT_MS = int(os.environ.get("DB_LOCK_TIMEOUT_MS", "2000"))
IDLE_IN_TX_TIMEOUT_MS = int(os.environ.get("DB_IDLE_IN_TX_TIMEOUT_MS", "30000"))


def _with_db_name(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def _db_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/") or "likes"


def _split_urls(raw: str) -> list[str]:
    return [u.strip() for u in raw.split(",") if u.strip()]


def _config(url: str, *, conn_max_age: int) -> dict:
    cfg = dj_database_url.parse(url, conn_max_age=conn_max_age, conn_health_checks=True)
    cfg["ENGINE"] = "likes_project.pgbackend"  # Django's, the health check only after idling (D137)
    options = (
        f"-c statement_timeout={STATEMENT_TIMEOUT_MS} -c lock_timeout={LOCK_TIMEOUT_MS} "
        f"-c idle_in_transaction_session_timeout={IDLE_IN_TX_TIMEOUT_MS} -c timezone=UTC"
    )
    cfg.setdefault("OPTIONS", {})["options"] = options
    cfg["OPTIONS"].setdefault("connect_timeout", 5)
    cfg["TEST"] = {"NAME": "test_" + cfg["NAME"]}
    return cfg


def build_databases(env: os._Environ | dict) -> tuple[dict, list[str], list[str]]:
    """Return (DATABASES, relation shard aliases, count partition aliases)."""
    conn_max_age = int(env.get("DB_CONN_MAX_AGE", "60"))
    default_url = env.get("DATABASE_URL", DEFAULT_DATABASE_URL)
    base_name = _db_name(default_url)

    rel_urls = _split_urls(env.get("RELATION_SHARD_URLS", ""))
    if not rel_urls:
        n = int(env.get("RELATION_SHARDS", "2"))
        rel_urls = [_with_db_name(default_url, f"{base_name}_rel_{i:02d}") for i in range(n)]
    cnt_urls = _split_urls(env.get("COUNT_PARTITION_URLS", ""))
    if not cnt_urls:
        m = int(env.get("COUNT_PARTITIONS", "2"))
        cnt_urls = [_with_db_name(default_url, f"{base_name}_cnt_{i:02d}") for i in range(m)]

    databases = {"default": _config(default_url, conn_max_age=conn_max_age)}
    rel_aliases = []
    for i, url in enumerate(rel_urls):
        alias = f"rel_{i:02d}"
        databases[alias] = _config(url, conn_max_age=conn_max_age)
        rel_aliases.append(alias)
    cnt_aliases = []
    for i, url in enumerate(cnt_urls):
        alias = f"cnt_{i:02d}"
        databases[alias] = _config(url, conn_max_age=conn_max_age)
        cnt_aliases.append(alias)
    return databases, rel_aliases, cnt_aliases
