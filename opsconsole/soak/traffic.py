"""The soak's clients (issue 33 §1): spec TEST-2's four groups as real HTTP clients of the service at `base_url`,
each a user of the soak's own population on a thread of its own, through the Python client (`clients/python`, the
client rules CLI-1 … CLI-4: one key per operation, retried with the same key). A background reader queries batches
with `minRelationVersions` (the client sends them), my-likes pages and likers pages. Every exchange goes to the
history through the client's transport."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from opsconsole.drills.population import DrillUser, Population
from opsconsole.soak.history import History, RecordingTransport
from opsconsole.soak.schedule import decisions, next_decision

CLIENT_SRC = Path(__file__).resolve().parents[2] / "clients" / "python"
# Seconds between one client's commands, by group (a toggler as fast as its answers come back, nearly).
PACE_S = {"uniform": 0.25, "hot": 0.15, "toggler": 0.03, "flipper": 0.1}
SIZES = {"uniform": 6, "hot": 4, "toggler": 2, "flipper": 2}  # users of each group
READ_PACE_S = 0.3
REPLAYING, REPLAY_SHARE = ("uniform", "hot"), 0.1  # their steps that send an old operation again (TEST-4 repeats)


def likes_client_module():
    """The Python client as the checkout holds it (it is not an installed package of the service)."""
    if str(CLIENT_SRC) not in sys.path:
        sys.path.insert(0, str(CLIENT_SRC))
    import likes_client

    return likes_client


@dataclass
class SoakClient:
    name: str
    group: str
    user: DrillUser
    own: int  # the index of the client's own video (a flipper's relation, a toggler's first target)
    api: object  # a likes_client.LikesClient
    raw: httpx.Client  # for late replays: an old operation's key sent again, as a network might deliver it
    done: list = field(default_factory=list)  # (key, video, desired) of its acknowledged operations


class SoakTraffic:
    """The clients of `groups` over `population`, sending to `base_url`, recorded into `history`."""

    def __init__(self, population: Population, history: History, *, base_url: str, seed: int, groups: list[str],
                 sizes: dict[str, int] | None = None):
        lc = likes_client_module()
        self.population, self.seed, self.history = population, seed, history
        self.errors = lc.LikesError
        self.stop_event = threading.Event()
        users = iter(population.users)
        self.clients: list[SoakClient] = []
        for group in groups:
            for i in range((sizes or SIZES)[group]):
                user = next(users)
                name = f"{group}-{i}"
                device = f"soak-{population.run_id}-ring" if group == "toggler" else f"soak-{population.run_id}-{name}"
                transport = RecordingTransport(history, name, user.user_id, headers={"X-Device-Id": device})
                api = lc.LikesClient(base_url, user.token, timeout=3.0, max_attempts=3, transport=transport)
                raw = httpx.Client(base_url=base_url, timeout=3.0, transport=transport,
                                   headers={"Authorization": f"Token {user.token}"})
                self.clients.append(SoakClient(name, group, user, (i * 2) % len(population.videos), api, raw))
        # Who liked a video is the author's to read (unless the likers are public).
        self.author = lc.LikesClient(base_url, population.author.token, timeout=3.0, max_attempts=3,
                                     transport=RecordingTransport(history, "author", population.author.user_id))
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._commands, args=(c,), name=f"soak-{c.name}", daemon=True)
                        for c in self.clients]
        self.threads.append(threading.Thread(target=self._reads, name="soak-reader", daemon=True))
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=30)

    def close(self) -> None:
        for c in self.clients:
            c.api.close()
            c.raw.close()
        self.author.close()

    def _commands(self, c: SoakClient) -> None:
        videos = self.population.videos
        rng = decisions(self.seed, c.name, c.group, videos=len(videos), own=c.own)

        def seen(index: int) -> bool | None:
            rel = c.api.confirmed(videos[index])
            return None if rel is None else rel.state == "LIKED"

        while not self.stop_event.is_set():
            d = next_decision(rng, c.group, videos=len(videos), own=c.own, seen=seen)
            try:
                if c.done and c.group in REPLAYING and rng.random() < REPLAY_SHARE:
                    key, video, desired = c.done[rng.randrange(len(c.done))]
                    c.raw.put(f"/v1/videos/{video}/like-relation", headers={"Idempotency-Key": key},
                              json={"desiredState": desired})
                else:
                    rel = c.api.set_like(videos[d.video], d.liked)
                    if rel.operation_id:
                        c.done.append((rel.operation_id, videos[d.video], "LIKED" if d.liked else "UNLIKED"))
            except (self.errors, httpx.HTTPError):
                pass  # refused (rate limits, a frozen account) or unanswered: the history has every attempt
            except Exception as exc:  # noqa: BLE001 - a client bug must not end the soak silently
                self.history.write(kind="client_error", client=c.name, error=repr(exc)[:300])
            self.stop_event.wait(PACE_S[c.group])

    def _reads(self) -> None:
        videos, i = self.population.videos, 0
        while not self.stop_event.is_set():
            c = self.clients[i % len(self.clients)]
            i += 1
            try:
                c.api.batch(videos)
                next(iter(c.api.my_likes(limit=20)), None)
                next(iter(self.author.likers(videos[i % len(videos)], limit=20)), None)
            except self.errors:
                pass
            except Exception as exc:  # noqa: BLE001
                self.history.write(kind="client_error", client=f"reader/{c.name}", error=repr(exc)[:300])
            self.stop_event.wait(READ_PACE_S)
