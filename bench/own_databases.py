"""A benchmark's own database set (likes_bench_<name>, + _rel_NN, _cnt_NN) on the bench's server: its URL, and
its databases dropped before a run. Used by the benchmarks that change routes or contracts (bench/migration.sh,
bench/slotmove.sh), whose runs must not touch the shared likes_bench* set the other benchmarks measure on.

    python -m bench.own_databases url  DATABASE_URL NAME TAG   # prints DATABASE_URL pointed at NAME
    python -m bench.own_databases drop DATABASE_URL NAME TAG   # drops NAME and NAME_(rel|cnt)_NN

Only 127.0.0.1 / localhost is accepted. A database someone is connected to is not dropped: the run stops."""

from __future__ import annotations

import re
import sys
from urllib.parse import urlsplit, urlunsplit


def _loopback(url: str, tag: str):
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        sys.exit(f"[{tag}] ERROR: DATABASE_URL points at {parts.hostname!r}; the benchmark only runs against "
                 "127.0.0.1")
    return parts


def url_for(url: str, name: str, tag: str) -> str:
    parts = _loopback(url, tag)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


def drop(url: str, base: str, tag: str) -> int:
    import psycopg
    from psycopg import sql

    parts = _loopback(url, tag)
    info = {"host": parts.hostname, "port": parts.port or 5432, "user": parts.username or None,
            "password": parts.password or None, "dbname": "postgres", "connect_timeout": 5, "autocommit": True}
    own = re.compile(rf"^{re.escape(base)}(_(rel|cnt)_[0-9]{{2}})?$")
    with psycopg.connect(**{k: v for k, v in info.items() if v is not None}) as conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall() if own.match(r[0])]
        for name in sorted(names):
            busy = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name]).fetchone()[0]
            if busy:
                sys.exit(f"[{tag}] ERROR: {busy} connections to {name}; is another run of this benchmark alive?")
            conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))
    print(f"[{tag}] dropped {len(names)} databases of an earlier run" if names else f"[{tag}] no earlier databases",
          file=sys.stderr)
    return len(names)


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] not in ("url", "drop"):
        sys.exit(__doc__)
    verb, url, name, tag = argv
    if verb == "url":
        print(url_for(url, name, tag))
    else:
        drop(url, name, tag)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
