"""Fault injectors. Each one says what it did in one line, undoes itself, and refuses (DrillRefused)
when injecting it here would hit more than the drill means to."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import redis
from django.conf import settings
from django.db import connections
from psycopg import sql

from likes_project.redis_client import cache_redis, cluster_startup_nodes, is_cluster_url, role_nodes, stream_redis
from likes_project.waiting import wait_until


class DrillRefused(Exception):
    """The drill cannot run here as asked; the message says why and what to do."""


UNDO_TIMEOUT_S = 60.0  # how long undoing a database refusal is tried before it is left to the operator


# --- a database that refuses connections -----------------------------------------------------------


def _server(alias: str) -> tuple[str, str, str]:
    cfg = connections[alias].settings_dict
    return (cfg["HOST"] or "127.0.0.1", str(cfg["PORT"] or 5432), cfg["NAME"])


@dataclass
class DatabaseRefusal:
    """`ALTER DATABASE ... ALLOW_CONNECTIONS false` and `pg_terminate_backend` of its sessions, through
    the server's maintenance database `postgres` with the alias's own credentials; undone with
    `ALLOW_CONNECTIONS true`. Needs the role to own the database (or be superuser)."""

    alias: str
    terminated: int = 0

    def check(self) -> None:
        if self.alias not in connections:
            raise DrillRefused(f"no database alias {self.alias!r}")
        mine = _server(self.alias)
        shared = [a for a in connections if a != self.alias and _server(a) == mine]
        if shared:
            raise DrillRefused(f"{self.alias} is the same database as {', '.join(shared)} ({mine[2]}); refusing "
                               f"its connections would take those down too")

    @property
    def database(self) -> str:
        return _server(self.alias)[2]

    def _maintenance(self):
        cfg = connections[self.alias].settings_dict
        try:
            return psycopg.connect(host=cfg["HOST"] or "127.0.0.1", port=cfg["PORT"] or 5432, user=cfg["USER"],
                                   password=cfg.get("PASSWORD") or None, dbname="postgres", autocommit=True,
                                   connect_timeout=5)
        except psycopg.Error as exc:
            raise DrillRefused(f"cannot reach the maintenance database `postgres` of {self.alias}: {exc}") from exc

    def _allow(self, allowed: bool) -> None:
        with self._maintenance() as conn:
            conn.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                sql.Identifier(self.database), sql.SQL("true" if allowed else "false")))

    def begin(self) -> str:
        try:
            self._allow(False)
        except psycopg.Error as exc:
            raise DrillRefused(f"cannot refuse connections to {self.database} ({self.alias}): {exc}") from exc
        with self._maintenance() as conn:
            rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE datname = %s AND pid <> pg_backend_pid()", [self.database]).fetchall()
        self.terminated = sum(1 for (ok,) in rows if ok)
        connections[self.alias].close()  # this process's own session was one of them
        return (f"ALTER DATABASE {self.database} ALLOW_CONNECTIONS false ({self.alias}); "
                f"{self.terminated} sessions terminated")

    def refusing(self) -> bool:
        """True when a new connection to the database is refused right now."""
        cfg = connections[self.alias].settings_dict
        try:
            psycopg.connect(host=cfg["HOST"] or "127.0.0.1", port=cfg["PORT"] or 5432, user=cfg["USER"],
                            password=cfg.get("PASSWORD") or None, dbname=self.database, connect_timeout=5).close()
        except psycopg.OperationalError:
            return True
        return False

    def end(self) -> str:
        """Undo: the one step that must not give up at the first refusal (the server may be out of connection slots
        for a moment while clients retry after the fault), so it is tried for up to a minute."""
        failures: list[str] = []

        def allowed() -> bool:
            try:
                self._allow(True)
            except (DrillRefused, psycopg.Error) as exc:
                failures.append(str(exc))
                return False
            return True

        if not wait_until(allowed, timeout_s=UNDO_TIMEOUT_S, poll_s=0.5):
            raise DrillRefused(f"could not allow connections to {self.database} again within {UNDO_TIMEOUT_S:g} s "
                               f"({failures[-1]}); run `manage.py drill --restore-databases`")
        again = f" (after {len(failures)} refused tries)" if failures else ""
        return f"ALTER DATABASE {self.database} ALLOW_CONNECTIONS true ({self.alias}){again}"


def databases_restore() -> list[str]:
    """ALLOW_CONNECTIONS true on every shard and partition (after a drill that was itself killed), once a private
    server a soak's `pg-hang` left stopped is continued."""
    private_servers_continue()
    done = []
    for alias in [*settings.RELATION_SHARD_ALIASES, *settings.COUNT_PARTITION_ALIASES]:
        DatabaseRefusal(alias).end()
        done.append(alias)
    return done


# --- a PostgreSQL server that hangs instead of refusing (issue 33 §1) ------------------------------------------


def _private_server_dir(data_dir: Path) -> bool:
    """Whether `data_dir` is a server this service's scripts started for themselves (`scripts/lib.sh`'s
    `pg_cluster_up`: `.data/<name>` of this checkout, or `/var/tmp/likes-<checkout hash>/<name>` when root runs
    it): the only servers a soak may stop."""
    base = Path(settings.BASE_DIR).resolve() / ".data"
    return data_dir.parent == base or (data_dir.parent.parent == Path("/var/tmp")
                                       and data_dir.parent.name.startswith("likes-"))


@dataclass
class ServerPause:
    """SIGSTOP of every process of the PostgreSQL server holding `alias` (its postmaster and backends), then
    SIGCONT: a store that hangs rather than refuses. Connections already open wait without an answer, new ones
    wait out `connect_timeout`. Refused unless the server is on 127.0.0.1, is one the service's scripts started
    privately (`.data/pg2` of the `scaled` topology), and holds no `default` database (pausing that server would
    stop the jobs, leases and audit of every test and tier, a different fault)."""

    alias: str
    pids: list[int] = field(default_factory=list)

    def _data_dir(self) -> Path:
        cfg = connections[self.alias].settings_dict
        try:
            with psycopg.connect(host=cfg["HOST"] or "127.0.0.1", port=cfg["PORT"] or 5432, user=cfg["USER"],
                                 password=cfg.get("PASSWORD") or None, dbname="postgres", autocommit=True,
                                 connect_timeout=5) as conn:
                return Path(conn.execute("SHOW data_directory").fetchone()[0]).resolve()
        except psycopg.Error as exc:
            raise DrillRefused(f"cannot read the data directory of {self.alias}'s server: {exc}") from exc

    def check(self) -> Path:
        if self.alias not in connections:
            raise DrillRefused(f"no database alias {self.alias!r}")
        host, port, _name = _server(self.alias)
        if host not in ("127.0.0.1", "localhost"):
            raise DrillRefused(f"{self.alias} is on {host}, not this host's 127.0.0.1")
        if _server("default")[:2] == (host, port):
            raise DrillRefused(f"{self.alias} shares the server of the `default` database ({host}:{port}); "
                               f"pausing it would stop every tier (the `scaled` topology's second server does not)")
        data_dir = self._data_dir()
        if not _private_server_dir(data_dir):
            raise DrillRefused(f"the server {host}:{port} ({data_dir}) was not started by this service's scripts; "
                               f"the soak signals only processes its own topology started")
        return data_dir

    def begin(self) -> str:
        data_dir = self.check()
        postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)  # first: it forks no new backend (and reaps none) from here on
        self.pids = [postmaster, *_children(postmaster)]  # listed after, so a backend that exits stays listed
        for pid in self.pids[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        host, port, _name = _server(self.alias)
        return f"SIGSTOP to the PostgreSQL server {host}:{port} of {self.alias} ({len(self.pids)} processes)"

    def end(self) -> str:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        return f"SIGCONT to its {len(self.pids)} processes"


def second_server_aliases() -> list[str]:
    """The shards and partitions on a PostgreSQL server other than `default`'s (the `scaled` topology's second)."""
    default = _server("default")[:2]
    return [a for a in [*settings.RELATION_SHARD_ALIASES, *settings.COUNT_PARTITION_ALIASES]
            if _server(a)[:2] != default]


def private_servers_continue() -> dict[str, int]:
    """SIGCONT to every process of each private server the scripts started (found by its `postmaster.pid`, without
    connecting: a stopped server does not answer): undoes a `pg-hang` whose soak was itself killed."""
    out = {}
    base = Path(settings.BASE_DIR).resolve() / ".data"
    for pid_file in [*base.glob("*/postmaster.pid"), *Path("/var/tmp").glob("likes-*/*/postmaster.pid")]:
        try:
            postmaster = int(pid_file.read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
        pids = [postmaster, *_children(postmaster)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)
        out[str(pid_file.parent)] = len(pids)
    return out


def _children(pid: int) -> list[int]:
    return [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat") if _parent_pid(p) == pid]


def _parent_pid(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])  # after "(comm)": state, ppid
    except (OSError, IndexError, ValueError):
        return None


# --- Redis roles ----------------------------------------------------------------------------------


def _redis_place(url: str) -> tuple[str, int, int]:
    parts = urlsplit(url)
    db = int((parts.path or "/0").lstrip("/") or 0)
    return (parts.hostname or "127.0.0.1", parts.port or 6379, db)


def _run_id(client: redis.Redis) -> str | None:
    try:
        return str(client.info("server").get("run_id"))
    except redis.RedisError:
        return None


def redis_roles_sharing(url: str) -> dict[str, str]:
    """Other Redis roles on the same server as `url`: role -> "same database" | "same server". A Cluster
    role (`redis+cluster://`) is on each of its startup nodes, database 0."""
    out = {}
    for role, other in (("cache", settings.REDIS_URL), ("event log", settings.REDIS_STREAMS_URL),
                        ("Celery broker", settings.CELERY_BROKER_URL)):
        if other == url:
            out[role] = "same database"
            continue
        if is_cluster_url(url) or is_cluster_url(other):
            common = {(h, p) for h, p, _db in _redis_places(url)} & {(h, p) for h, p, _db in _redis_places(other)}
            if common:
                out[role] = "same server"
            continue
        (host, port, db), (o_host, o_port, o_db) = _redis_place(url), _redis_place(other)
        mine = redis.Redis.from_url(url, socket_timeout=2)
        same_server = (o_host, o_port) == (host, port) or (
            _run_id(mine) is not None and _run_id(mine) == _run_id(redis.Redis.from_url(other, socket_timeout=2)))
        if same_server:
            out[role] = "same database" if o_db == db else "same server"
    return out


def _redis_places(url: str) -> list[tuple[str, int, int]]:
    if is_cluster_url(url):
        return [(host, port, 0) for host, port in cluster_startup_nodes(url)]
    return [_redis_place(url)]


def eventlog_flush() -> str:
    """FLUSHDB on the event log's database; says which other roles lived there too."""
    url = settings.REDIS_STREAMS_URL
    others = {r: w for r, w in redis_roles_sharing(url).items() if r != "event log" and w == "same database"}
    for node in role_nodes(stream_redis()):  # the one server, or every primary of a Cluster
        node.flushdb()
    where = ", ".join(f"{h}:{p}/{db}" for h, p, db in _redis_places(url))
    also = f" (also flushed: {', '.join(others)}, same database)" if others else ""
    return f"FLUSHDB on the event-log Redis {where}{also}"


@dataclass
class CachePause:
    """A deployment's cache outage: `CLIENT PAUSE <ms> ALL` on the cache Redis (every command of every
    client waits, so the app's 0.5 s socket timeouts fire as if the server were gone), then FLUSHDB on
    the cache database once the pause ends (it comes back empty). Refused when the event log or the
    broker share the cache's server: a pause would stop them too, which is a different drill."""

    seconds: float

    def check(self) -> None:
        if is_cluster_url(settings.REDIS_URL) and settings.REDIS_URL != settings.REDIS_STREAMS_URL:
            raise DrillRefused("cache-redis-down pauses one Redis server, and the cache role is a Redis Cluster; "
                               "run cluster-node-restart (it kills one node and brings it back empty)")
        shared = {r: w for r, w in redis_roles_sharing(settings.REDIS_URL).items() if r != "cache"}
        if shared:
            raise DrillRefused(
                "cache-redis-down pauses the cache Redis server, but " + ", ".join(f"the {r} ({w})" for r, w in
                                                                                 shared.items())
                + " live on it too, so the pause would stop them as well; point REDIS_URL at a Redis server of "
                  "its own to run this drill")

    def _client(self) -> redis.Redis:
        # Longer than the pause: FLUSHDB below waits for the pause to end.
        return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=self.seconds + 30)

    def begin(self) -> str:
        self._client().execute_command("CLIENT", "PAUSE", int(self.seconds * 1000), "ALL")
        host, port, _db = _redis_place(settings.REDIS_URL)
        return f"CLIENT PAUSE {int(self.seconds * 1000)} ALL on the cache Redis {host}:{port}"

    def down(self) -> bool:
        try:
            cache_redis().ping()
        except redis.RedisError:
            return True
        return False

    def end(self) -> str:
        self._client().flushdb()  # queued behind the pause: runs when it ends
        host, port, db = _redis_place(settings.REDIS_URL)
        return f"pause over; FLUSHDB on the cache database {host}:{port}/{db} (back empty)"


# --- a Redis Cluster node restarted empty (issue 16) --------------------------------------------------

# What the restarted node is started with: the settings it ran with, read before it goes down. Its
# cluster-config-file (nodes.conf) survives in its `dir`, so it comes back with its node id and slots
# and without data: a node that crashed and lost its memory, with no replica to promote.
_NODE_SETTINGS = ("port", "bind", "dir", "cluster-config-file", "cluster-node-timeout",
                  "cluster-require-full-coverage", "logfile", "pidfile", "maxmemory", "maxmemory-policy")


@dataclass
class ClusterNodeRestart:
    """SHUTDOWN NOSAVE of one primary of the Redis Cluster holding the cache role and the event log, and a
    `redis-server` on this host started again with its settings (empty). Refused unless both roles live
    on one Cluster, the node is on this host and redis-server is installed here."""

    node: str | None = None  # host:port; default: the last primary
    settings_: dict[str, str] = field(default_factory=dict)

    def check(self) -> None:
        client = cache_redis()
        if len(role_nodes(client)) < 2 or settings.REDIS_URL != settings.REDIS_STREAMS_URL:
            raise DrillRefused("cluster-node-restart needs the cache role and the event log on one Redis Cluster "
                               "(REDIS_URL = REDIS_STREAMS_URL = redis+cluster://...; LIKES_TOPOLOGY=scaled)")
        names = sorted(n.name for n in client.get_primaries())
        self.node = self.node or names[-1]
        if self.node not in names:
            raise DrillRefused(f"{self.node} is not a primary of the cluster ({', '.join(names)})")
        if self.node.rpartition(":")[0] not in ("127.0.0.1", "localhost") or not shutil.which("redis-server"):
            raise DrillRefused(f"{self.node} must run on this host (127.0.0.1) with redis-server installed here, "
                               f"so that the drill can start it again")

    def _client(self) -> redis.Redis:
        host, _, port = self.node.rpartition(":")
        return redis.Redis(host=host, port=int(port), socket_timeout=2, socket_connect_timeout=1)

    def begin(self) -> str:
        conn = self._client()
        found = {}
        for name in _NODE_SETTINGS:
            found.update({k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                          for k, v in conn.config_get(name).items()})
        self.settings_ = {k: v for k, v in found.items() if v != ""}
        keys = int(conn.dbsize())
        with contextlib.suppress(redis.ConnectionError):  # the server closes the connection as it goes down
            conn.shutdown(nosave=True)
        return f"SHUTDOWN NOSAVE of Redis Cluster node {self.node} ({keys} keys: caches and stream partitions)"

    def down(self) -> bool:
        try:
            self._client().ping()
        except redis.RedisError:
            return True
        return False

    def end(self) -> str:
        argv = ["redis-server", "--daemonize", "yes", "--cluster-enabled", "yes", "--save", "", "--appendonly", "no"]
        for name, value in self.settings_.items():
            argv += [f"--{name}", *value.split()] if name == "bind" else [f"--{name}", value]
        subprocess.run(argv, check=True, timeout=30, capture_output=True)
        for _ in range(100):
            if not self.down():
                break
            time.sleep(0.1)  # the server is starting: nothing to subscribe to
        return f"redis-server {self.node} started again, empty (node id and slots from its nodes.conf)"


# --- local Celery workers ---------------------------------------------------------------------------


def celery_worker_pids() -> list[int]:
    """Local processes running `celery ... worker` (main processes and their pool children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        if any(w.endswith("celery") or w == "celery" for w in words[:3]) and "worker" in words:
            found.append(int(entry.name))
    return sorted(found)


def pids_kill(pids: list[int]) -> list[int]:
    killed = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed
