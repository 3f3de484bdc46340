"""The command load of the slot-move benchmark: `procs` spawned processes, each calling
`relations.services.commands.relation_set_state` (the service layer, as the web tier does) for its own slice of
the users, flipping a (user, video) pair between LIKED and UNLIKED, with a fresh operation id each time. Every
command is timed (wall-clock start, latency) and its answer kept: the driver finds the pauses in them and checks
the final state against the acknowledged ones. A process stops when the driver sets the stop event, or at its
deadline; it writes its samples as JSON to its own file."""

from __future__ import annotations

import json
import random
import time
import uuid

MAX_SECONDS = 3600.0


def client(index: int, users: list[int], videos: list[str], stop, out_path: str, seed: int) -> None:
    from bench.procs import client_setup

    client_setup()
    from likes_project.errors import DomainError
    from relations.services import commands

    open(f"{out_path}.ready", "w").close()
    rng = random.Random(seed * 1000 + index)
    state: dict[tuple[int, str], str] = {}
    samples = []  # [t0 (epoch s), latency ms, user, video, desired, outcome]
    deadline = time.monotonic() + MAX_SECONDS
    while not stop.is_set() and time.monotonic() < deadline:
        user, video = rng.choice(users), rng.choice(videos)
        desired = "UNLIKED" if state.get((user, video)) == "LIKED" else "LIKED"
        t0, m0 = time.time(), time.monotonic()
        try:
            commands.relation_set_state(user_id=user, video_id=video, desired_state=desired,
                                        operation_id=uuid.uuid4().hex, device_id="bench-slot")
            outcome = "ok"
            state[(user, video)] = desired
        except DomainError as exc:
            outcome = getattr(exc, "code", type(exc).__name__)
        except Exception as exc:  # a benchmark client reports what broke; it never stops the run
            outcome = f"error:{type(exc).__name__}"
        samples.append([t0, round((time.monotonic() - m0) * 1000.0, 3), user, video, desired, outcome])
    with open(out_path, "w") as f:
        json.dump(samples, f)


class Load:
    """Start `procs` clients over disjoint slices of `users`; stop() joins them and returns every sample."""

    def __init__(self, *, procs: int, users: list[int], videos: list[str], seed: int, tmpdir: str):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.stop_event = ctx.Event()
        self.paths = [f"{tmpdir}/load-{i}.json" for i in range(procs)]
        self.procs = [ctx.Process(target=client, args=(i, users[i::procs], videos, self.stop_event, self.paths[i],
                                                       seed), daemon=True) for i in range(procs)]
        for p in self.procs:
            p.start()

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until every client has set Django up and is about to send (or `timeout_s`)."""
        import os

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(os.path.exists(f"{p}.ready") for p in self.paths):
            time.sleep(0.1)  # polls for the clients' ready files, bounded by timeout_s (spawned processes)

    def stop(self) -> list[list]:
        self.stop_event.set()
        for p in self.procs:
            p.join(timeout=120)
            if p.is_alive():
                p.kill()
        samples = []
        for path in self.paths:
            try:
                with open(path) as f:
                    samples.extend(json.load(f))
            except FileNotFoundError:
                pass
        return sorted(samples)
