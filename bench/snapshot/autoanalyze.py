"""A stand-in for autovacuum's ANALYZE on the count partitions, for servers where autovacuum is off (the bench's
server had `autovacuum = off`).

The restore bulk-loads a whole generation into the projection and vbucket tables and does not ANALYZE them; the
planner then believes the new generation holds a row or so, and the replay's row locks
(counting/services/group_kit.py rows_lock) scan the whole generation once per key (a nested loop), seconds a
statement at 1,000,000 rows, past the 5 s statement timeout. A default server's autovacuum analyzes such a table
within a naptime. With `--autoanalyze-naptime N` (default 60, autovacuum's default naptime; 0: off) this thread
does what autovacuum's analyze would: every N seconds, on every count partition, ANALYZE each of the two tables
whose rows changed since the last analyze exceed autovacuum_analyze_threshold + autovacuum_analyze_scale_factor ×
reltuples (the server's own settings, 50 + 0.1 × reltuples by default). Every ANALYZE it ran is reported.
"""

from __future__ import annotations

import threading
import time

from bench.snapshot import log

TABLES = ("counting_likecountprojection", "counting_videolikecountvbucket")


class AutoAnalyze(threading.Thread):
    def __init__(self, naptime: float, *, tables: tuple[str, ...] = TABLES):
        super().__init__(daemon=True, name="bench-autoanalyze")
        self.naptime, self.tables = naptime, tables
        self.done = threading.Event()
        self.runs: list[dict] = []
        self.errors: list[str] = []
        self.t0 = time.time()

    def _pass(self, conns: dict) -> None:
        for alias, conn in conns.items():
            threshold = float(conn.execute("SHOW autovacuum_analyze_threshold").fetchone()[0])
            scale = float(conn.execute("SHOW autovacuum_analyze_scale_factor").fetchone()[0])
            rows = conn.execute(
                "SELECT s.relname, s.n_mod_since_analyze, greatest(c.reltuples, 0) FROM pg_stat_user_tables s "
                "JOIN pg_class c ON c.oid = s.relid WHERE s.relname = ANY(%s)", [list(self.tables)]).fetchall()
            for table, changed, reltuples in rows:
                if changed <= threshold + scale * reltuples:
                    continue
                t = time.perf_counter()
                conn.execute(f"ANALYZE {table}")
                self.runs.append({"at_s": round(time.time() - self.t0, 1), "partition": alias, "table": table,
                                  "changed_rows": int(changed), "reltuples_before": int(reltuples),
                                  "ms": round((time.perf_counter() - t) * 1000, 1)})
                log(f"  autoanalyze stand-in: ANALYZE {table} on {alias} ({int(changed):,} rows changed)")

    def run(self) -> None:
        import psycopg
        from django.conf import settings

        from bench.common import pg_conninfo

        conns = {}
        try:
            conns = {a: psycopg.connect(**pg_conninfo(a), autocommit=True, connect_timeout=5)
                     for a in settings.COUNT_PARTITION_ALIASES}
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
        self.join(timeout=60)
        return {"naptime_s": self.naptime, "t0": self.t0, "runs": self.runs, "errors": self.errors[:10]}


def server_autovacuum() -> str:
    from django.db import connections

    with connections["default"].cursor() as cur:
        cur.execute("SHOW autovacuum")
        return cur.fetchone()[0]
