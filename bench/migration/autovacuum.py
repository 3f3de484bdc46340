"""A stand-in for autovacuum on every database of the run, for servers where autovacuum is off (this bench's server
has `autovacuum = off`; bench/snapshot/autoanalyze.py stands in for its ANALYZE on the count partitions only).

This benchmark starts from freshly created databases and churns tables that a default server's autovacuum would
keep in shape: the outbox (every row updated twice by the publisher, so the claim query's partial index fills with
dead entries), the relations, the projector's receipts and dirty marks, and the count tables a migration fills
and deletes in bulk. Without it the publishers' claim query alone ends up busy on a core. Every `naptime` seconds,
for every user table of every database of the run, it does what autovacuum would with the server's own
thresholds: VACUUM (ANALYZE) when the dead tuples exceed autovacuum_vacuum_threshold +
autovacuum_vacuum_scale_factor × reltuples (50 + 0.2 × by default), else ANALYZE when the rows changed since the
last analyze exceed autovacuum_analyze_threshold + autovacuum_analyze_scale_factor × reltuples (50 + 0.1 ×).
Every run is reported."""

from __future__ import annotations

import threading
import time

from bench.migration import log


class AutoVacuum(threading.Thread):
    def __init__(self, naptime: float):
        super().__init__(daemon=True, name="bench-autovacuum")
        self.naptime = naptime
        self.done = threading.Event()
        self.runs: list[dict] = []
        self.errors: list[str] = []
        self.t0 = time.time()

    def _pass(self, conns: dict) -> None:
        for alias, conn in conns.items():
            s = {name: float(conn.execute(f"SHOW {name}").fetchone()[0]) for name in (
                "autovacuum_vacuum_threshold", "autovacuum_vacuum_scale_factor", "autovacuum_analyze_threshold",
                "autovacuum_analyze_scale_factor")}
            rows = conn.execute(
                "SELECT s.relname, s.n_dead_tup, s.n_mod_since_analyze, greatest(c.reltuples, 0) "
                "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid").fetchall()
            for table, dead, changed, reltuples in rows:
                if self.done.is_set():
                    return
                if dead > s["autovacuum_vacuum_threshold"] + s["autovacuum_vacuum_scale_factor"] * reltuples:
                    what = "VACUUM (ANALYZE)"
                elif changed > s["autovacuum_analyze_threshold"] + s["autovacuum_analyze_scale_factor"] * reltuples:
                    what = "ANALYZE"
                else:
                    continue
                t = time.perf_counter()
                conn.execute(f'{what} "{table}"')
                self.runs.append({"at_s": round(time.time() - self.t0, 1), "db": alias, "table": table, "what": what,
                                  "dead": int(dead), "changed": int(changed), "reltuples": int(reltuples),
                                  "ms": round((time.perf_counter() - t) * 1000, 1)})

    def run(self) -> None:
        import psycopg
        from django.conf import settings

        from bench.common import pg_conninfo

        conns = {}
        try:
            conns = {a: psycopg.connect(**pg_conninfo(a), autocommit=True, connect_timeout=5)
                     for a in settings.DATABASES}
            while not self.done.wait(self.naptime):  # autovacuum's naptime (pacing)
                try:
                    self._pass(conns)
                except Exception as exc:
                    self.errors.append(f"{exc.__class__.__name__}: {exc}"[:200])
        except Exception as exc:
            self.errors.append(f"{exc.__class__.__name__}: {exc}"[:200])
        finally:
            for conn in conns.values():
                conn.close()

    def stop(self) -> dict:
        self.done.set()
        self.join(timeout=120)
        by = {}
        for r in self.runs:
            key = f"{r['what']} {r['table']}"
            by[key] = by.get(key, 0) + 1
        log(f"autovacuum stand-in: {len(self.runs)} runs ({sum(r['ms'] for r in self.runs) / 1000:.1f} s)")
        return {"naptime_s": self.naptime, "t0": self.t0, "runs": self.runs, "by_table": by,
                "errors": self.errors[:10]}
