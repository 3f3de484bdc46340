"""The migration role of the benchmark's spawned checker process: one migration's ops job run to its end as a
worker runs it (`job_run_inline`, what `manage.py bucket_migration_approve --run` and the ops queue do), with
the protocol's steps and the parts of its cutover timed in this process.

The timing wraps functions of counting.services.migration (protocol, changelog) and counting.services.manifests
by reassigning their module attributes in this process only, for the length of the job, and puts them back
after: the protocol calls them through those module globals, so it runs unchanged, each call timed with
time.monotonic(). Nothing is timed in the projectors or the command clients."""

from __future__ import annotations

import functools
import time

from bench.projection.roles import reset_connections

# The protocol's steps (protocol.migration_run looks them up by name on every call).
STEPS = ("_prepare", "_copy", "_catch_up", "_cutover", "_verify", "_cleanup")
# Inside the cutover: from the source fences DRAINING (horizon with a state) to the CAS commit.
PARTS = {
    "protocol": ("_replay", "target_fences_set", "_candidate", "source_fences_retire", "source_fences_reopen",
                 "_contract_problems", "transition", "save", "checkpoints_get"),
    "changelog": ("horizon", "position", "rows_after", "rows_apply", "changes_between", "bucket_rows",
                  "identity_problems", "rows_delete", "rows_count"),
    "manifests": ("manifest_seal", "manifest_items", "routes_materialize"),
    "route_switch": ("switch_exclusive",),
}


class StepTimers:
    """Install wrappers that record (name, t0, t1, extra) for every call; uninstall puts the originals back."""

    def __init__(self):
        self.calls: list[tuple[str, float, float, dict]] = []
        self._saved: list[tuple[object, str, object]] = []
        self.missing: list[str] = []

    def _wrap(self, module, name: str) -> None:
        fn = getattr(module, name, None)
        if fn is None:  # the code measured has no such function (it moves on): not timed
            self.missing.append(f"{module.__name__}.{name}")
            return
        calls = self.calls

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = time.monotonic()
            try:
                out = fn(*args, **kwargs)
            finally:
                extra = {}
                if name == "horizon" and kwargs.get("state"):
                    extra["state"] = kwargs["state"]
                calls.append((name, t0, time.monotonic(), extra))
            return out

        self._saved.append((module, name, fn))
        setattr(module, name, timed)

    def _wrap_context(self, module, name: str) -> None:
        """A context manager factory (route_switch.switch_exclusive): the time to acquire it, then the hold."""
        fn = getattr(module, name, None)
        if fn is None:
            self.missing.append(f"{module.__name__}.{name}")
            return
        calls = self.calls

        class _Timed:
            def __init__(self, *args, **kwargs):
                self.cm = fn(*args, **kwargs)

            def __enter__(self):
                self.t0 = time.monotonic()
                out = self.cm.__enter__()
                self.t1 = time.monotonic()
                calls.append((f"{name}.acquire", self.t0, self.t1, {}))
                return out

            def __exit__(self, *exc):
                try:
                    return self.cm.__exit__(*exc)
                finally:
                    calls.append((f"{name}.held", self.t1, time.monotonic(), {}))

        self._saved.append((module, name, fn))
        setattr(module, name, _Timed)

    def install(self) -> None:
        from counting.services import manifests, route_switch
        from counting.services.migration import changelog, protocol

        for name in STEPS:
            self._wrap(protocol, name)
        for name in PARTS["protocol"]:
            self._wrap(protocol, name)
        for name in PARTS["changelog"]:
            self._wrap(changelog, name)
        for name in PARTS["manifests"]:
            self._wrap(manifests, name)
        self._wrap_context(route_switch, "switch_exclusive")

    def uninstall(self) -> None:
        for module, name, fn in reversed(self._saved):
            setattr(module, name, fn)
        self._saved.clear()


def role_migration(job: dict, stop, parent_pid: int) -> dict:
    """Run the ops job of an approved migration (job["job_id"]) to its end, its steps timed."""
    from likes_project.opsjobs.services import job_run_inline

    reset_connections()
    said: list[tuple[float, str]] = []
    timers = StepTimers()
    timers.install()
    m0, t0 = time.monotonic(), time.time()
    try:
        done = job_run_inline(job["job_id"], on_say=lambda m: said.append((round(time.time(), 4), m[:300])),
                              wait_s=60.0)
    finally:
        timers.uninstall()
    t1 = time.time()
    # Monotonic times as seconds since the job started, and the wall-clock start to place them.
    calls = [(name, round(a - m0, 6), round(b - m0, 6), extra) for name, a, b, extra in timers.calls]
    return {"job_status": done.status, "job_error": done.last_error, "result": done.result, "t_start": t0,
            "t_end": t1, "said": said, "calls": calls, "not_timed": timers.missing}


ROLES = {"migration": role_migration}
