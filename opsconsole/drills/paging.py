"""Spec §7's drill 15: the likers list and the liked list paged through the public API while the relations under
them churn (unlike, re-like) and likers switch their privacy. Both cursors are live traversals (LIST-4, REV-9):
items may vanish or move in front of the cursor, but a walk never returns an item twice, never skips one that was
liked (and visible) throughout, and always ends; a cursor moves only past rows the page really scanned: the liked
list's past the rows it examined (LIST-6), the likers list's, per reverse shard, past the entries popped from the
merge heap and returned or filtered, never past rows merely prefetched (REV-7)."""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass, field

from django.db import connections

from likes_project.waiting import wait_until
from opsconsole.drills.api import DrillApi
from opsconsole.drills.population import DrillUser, drill_video_create
from opsconsole.drills.scenarios import Context, Drill
from opsconsole.drills.traffic import LIKED, UNLIKED

LIMIT = 2  # per page: every reverse shard prefetches LIMIT + 1 rows, so pages fill with rows prefetched elsewhere
MINE = 6  # videos of the drill's own in the walker's liked list; the odd ones churn
CHURN_EVERY_S = 0.15  # pacing: a relation's transitions within a drill stay under the relation bucket's 20
MAX_PAGES = 500  # a walk longer than this is a loop
READY_WAIT_S = 60.0  # bounds the wait for the index to list every first like before any walk
TOP, BOTTOM = (math.inf, 0), (-math.inf, 0)  # a frontier before anything is popped / once exhausted


@dataclass
class Page:
    before: object  # the cursor it was read with, decoded (likers: frontiers per shard; my-likes: a raw key)
    after: object  # the cursor it answered, decoded (the end: every shard exhausted / BOTTOM)
    items: list  # likers: (userId, likedAt); my-likes: videoId


@dataclass
class Walk:
    kind: str  # likers | my-likes
    facts_before: dict  # likers: user -> (state, version, sort key); my-likes: video -> (state, version, sort key)
    facts_after: dict = field(default_factory=dict)
    pages: list[Page] = field(default_factory=list)
    shard_of: dict[int, int] = field(default_factory=dict)  # likers: user -> reverse shard
    ended: bool = False
    error: str = ""
    churn: Counter = field(default_factory=Counter)  # the churn's actions while it walked


class PagingUnderChurn(Drill):
    """Drill 15. Injects: a video of the drill's own liked by every drill user, and six more liked by one of them
    (the walker); then, for the fault's length, one thread pages the video's likers (as its author) and the walker's
    liked list, LIMIT items a page, over and over, while another keeps unliking, re-liking and switching the
    privacy of every other liker (likesPrivate on and off) and unliking and re-liking three of the walker's six
    videos, one action between any two pages at least. With LIMIT 2 every reverse shard prefetches three rows, so
    nearly every likers page fills while other shards still hold prefetched rows it never popped.
    Checks, per walk: no item twice; every item liked throughout the walk (the same LIKED version at both ends, and
    for likers never made private) returned exactly once; the walk ends; per page, each reverse shard's frontier
    moves only down, only to an entry the page returned or a liker hidden by privacy, and never past a
    liked-throughout liker of that shard the page did not return; the liked list's cursor is the last row the page
    returned whenever the page filled, and never passes a liked-throughout video it did not return. Afterwards
    (churn stopped, privacy restored) a fresh walk of each list equals the facts. Why: a cursor that advanced by
    prefetched rows would skip those rows for good (REV-7); one that froze on a hidden page would loop (LIST-6)."""

    name = "paging-under-churn"
    spec_numbers = (15,)
    summary = ("likers and liked lists paged while likes churn and privacy switches: no skips, no repeats, only "
               "popped items advance the cursor")
    commands_succeed_while = "the likers and liked lists were paged under churn"
    default_fault_s = 20.0

    def prepare(self, ctx: Context) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.crashed: list[str] = []
        self.walks: list[Walk] = []
        self.churned: Counter = Counter()  # action -> how many (and non-200 answers by status)
        self.privacy_before: dict = {}
        self.video = None
        self.churners: list[DrillUser] = []

    # --- inject -------------------------------------------------------------------------------------

    def inject(self, ctx: Context) -> str:
        from relations.selectors.privacy import user_privacy_get

        population = ctx.traffic.population
        self.author, users = population.author, population.users
        self.all_users = list(users)
        self.walker, self.churners = users[0], users[1::2]
        self.video = drill_video_create(population, "likers")
        self.mine = [drill_video_create(population, f"mine{i}") for i in range(MINE)]
        api = DrillApi()
        for user in users:
            self._command(api, user, self.video, LIKED, "like")
        for video in self.mine:
            self._command(api, self.walker, video, LIKED, "like")
        self.privacy_before = {u.user_id: user_privacy_get(user_id=u.user_id) for u in self.churners}
        everyone = sorted(u.user_id for u in users)

        def listed() -> bool:
            got = self._walk_all(api, "likers")
            return isinstance(got, list) and sorted(got) == everyone

        ready = wait_until(listed, timeout_s=READY_WAIT_S, poll_s=0.5)
        if not ready:
            self.crashed.append(f"the likers index did not list the {len(everyone)} first likes of {self.video} "
                                f"within {READY_WAIT_S:.0f} s; no walk was started")
            return f"{self.video} liked by {len(users)} drill users; the index never listed them all"
        for target, name in ((self._churn, "churn"), (self._walk_loop, "walk")):
            thread = threading.Thread(target=self._guarded, args=(target,), daemon=True, name=f"drill-paging-{name}")
            self.threads.append(thread)
            thread.start()
        return (f"{self.video} liked by {len(users)} drill users, {len(self.mine)} videos liked by "
                f"{self.walker.username}; paging both lists {LIMIT} a page while {len(self.churners)} likers unlike, "
                f"re-like and switch privacy and {self.walker.username} unlikes and re-likes {len(self.mine[1::2])} "
                "of its videos")

    def _command(self, api: DrillApi, user: DrillUser, video: str, desired: str, action: str) -> None:
        answer = api.like_put(user, video, desired, f"{video}-{user.user_id}-{self.churned.total()}")
        self._tally(action, answer)

    def _tally(self, action: str, answer) -> None:
        # A relation limited by its per-minute bucket (429) just keeps its state: noted, never a failure.
        self.churned[action if answer.ok else f"{action} {answer.status} {answer.code}".strip()] += 1

    def _guarded(self, target) -> None:
        try:
            target()
        except Exception as exc:  # noqa: BLE001 - a crash of the drill's own client is a FAIL, never silent
            self.crashed.append(f"{target.__name__}: {exc.__class__.__name__}: {exc}")
        finally:
            connections.close_all()  # this thread's connections

    # --- the churn ------------------------------------------------------------------------------------

    def _churn(self) -> None:
        """Round after round: every churner takes its next step (unlike, re-like, private, public; every other
        churner starts at private, so each kind happens in the first two rounds), then one of the walker's odd
        videos flips; one action every CHURN_EVERY_S."""
        api = DrillApi()
        steps = Counter({u.user_id: 2 * (i % 2) for i, u in enumerate(self.churners)})
        flipping = self.mine[1::2]
        for n in range(10**9):
            for user in self.churners:
                step = steps[user.user_id] % 4
                steps[user.user_id] += 1
                if step < 2:
                    self._command(api, user, self.video, UNLIKED if step == 0 else LIKED,
                                  "unlike" if step == 0 else "re-like")
                else:
                    self._tally("privacy", api.privacy_put(user, likes_private=step == 2))
                if self.stop.wait(CHURN_EVERY_S):
                    return
            video = flipping[n % len(flipping)]
            liked = steps[video] % 2 == 0
            steps[video] += 1
            self._command(api, self.walker, video, UNLIKED if liked else LIKED, "unlike" if liked else "re-like")
            if self.stop.wait(CHURN_EVERY_S):
                return

    # --- the walks ------------------------------------------------------------------------------------

    def _walk_loop(self) -> None:
        api = DrillApi()
        while not self.stop.is_set():
            for kind in ("likers", "my-likes"):
                if not self.stop.is_set():
                    self.walks.append(self._walk(api, kind))

    def _page(self, api: DrillApi, kind: str, cursor: str | None):
        if kind == "likers":
            return api.likers_page(self.author, self.video, limit=LIMIT, cursor=cursor)
        return api.my_likes_page(self.walker, limit=LIMIT, cursor=cursor)

    def _decode(self, kind: str, cursor: str | None, shards: int, generation: int):
        """A cursor as the service reads it: per reverse shard the popped frontier (TOP: nothing popped, BOTTOM:
        exhausted), or the liked list's raw key (micros, video id); None (the end) is BOTTOM everywhere."""
        from counting.selectors.likers import EXHAUSTED, likers_cursor_decode
        from likes_project.cursors import micros
        from relations.selectors.my_likes import list_cursor_decode

        if kind == "likers":
            if cursor is None:
                return [BOTTOM] * shards
            frontiers = likers_cursor_decode(caller_id=self.author.user_id, video_id=self.video, cursor=cursor,
                                             generation=generation, shards=shards)
            return [TOP if f is None else BOTTOM if f == EXHAUSTED else tuple(f) for f in frontiers]
        if cursor is None:
            return BOTTOM
        key = list_cursor_decode(user_id=self.walker.user_id, cursor=cursor)
        return (micros(key.updated_at), key.video_id)

    def _facts(self, kind: str) -> dict:
        """Likers: each drill user's relation with the video, keyed as the sort index orders it (liked_at micros,
        user); my-likes: each of the walker's relations, keyed as its list orders it (updated_at micros, video)."""
        from likes_project.cursors import micros
        from relations import routing
        from relations.models import LikeRelation

        if kind == "likers":
            out = {}
            for alias, users in routing.group_users_by_alias(u.user_id for u in self.all_users).items():
                for uid, state, version, at in LikeRelation.objects.using(alias).filter(
                        user_id__in=users, video_id=self.video).values_list(
                        "user_id", "state", "relation_version", "state_changed_at"):
                    out[uid] = (state, version, (micros(at), uid))
            return out
        rows = LikeRelation.objects.using(routing.alias_for_user(self.walker.user_id)).filter(
            user_id=self.walker.user_id).values_list("video_id", "state", "relation_version", "updated_at")
        return {vid: (state, version, (micros(at), vid)) for vid, state, version, at in rows}

    def _walk(self, api: DrillApi, kind: str) -> Walk:
        from counting import routing

        gen = routing.reverse_active()
        walk = Walk(kind, self._facts(kind))
        if kind == "likers":
            walk.shard_of = {u.user_id: gen.shard_of(u.user_id) for u in self.all_users}
        before_churn = self.churned.copy()
        decoded, cursor = ([TOP] * gen.shards if kind == "likers" else TOP), None
        for _ in range(MAX_PAGES):
            answer = self._page(api, kind, cursor)
            if not answer.ok:
                walk.error = f"page {len(walk.pages) + 1} answered {answer.status} {answer.code}"
                break
            items = [(i["userId"], i["likedAt"]) if kind == "likers" else i["videoId"] for i in answer.body["items"]]
            cursor = answer.body.get("nextCursor")
            after = self._decode(kind, cursor, gen.shards, gen.generation)
            walk.pages.append(Page(decoded, after, items))
            decoded = after
            if cursor is None:
                walk.ended = True
                break
            # The churn acts between any two pages (bounded: a stalled churn is seen in the evidence instead).
            done = self.churned.total()
            wait_until(lambda done=done: self.churned.total() > done or self.stop.is_set(), timeout_s=2, poll_s=0.02)
        walk.facts_after = self._facts(kind)
        walk.churn = self.churned - before_churn
        return walk

    def _walk_all(self, api: DrillApi, kind: str, limit: int = 100) -> list | str:
        """A whole walk at once (no churn between pages): the user ids / video ids as a refreshed client sees
        them, or what went wrong."""
        ids, cursor = [], None
        for _ in range(MAX_PAGES):
            answer = (api.likers_page(self.author, self.video, limit=limit, cursor=cursor) if kind == "likers"
                      else api.my_likes_page(self.walker, limit=limit, cursor=cursor))
            if not answer.ok:
                return f"answered {answer.status} {answer.code}"
            ids += [i["userId"] if kind == "likers" else i["videoId"] for i in answer.body["items"]]
            cursor = answer.body.get("nextCursor")
            if cursor is None:
                return ids
        return f"no end within {MAX_PAGES} pages"

    # --- in effect, recover -----------------------------------------------------------------------------

    def in_effect(self, ctx: Context) -> bool | None:
        """Both threads alive (walking and churning)."""
        return bool(self.threads) and all(t.is_alive() for t in self.threads)

    def recover(self, ctx: Context) -> str:
        from likes_project.audit.services import system_actor
        from relations.services.privacy import user_privacy_set

        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)
        for user_id, before in self.privacy_before.items():
            user_privacy_set(user_id=user_id, likes_private=before.likes_private, likers_public=before.likers_public,
                             actor=system_actor("drill"))
        return (f"churn and paging stopped, the privacy of {len(self.privacy_before)} likers restored; "
                f"{self._evidence()}")

    def _evidence(self) -> str:
        likers = [w for w in self.walks if w.kind == "likers"]
        mine = [w for w in self.walks if w.kind == "my-likes"]
        churn = sum((w.churn for w in self.walks), Counter())
        refused = {k: n for k, n in self.churned.items() if " " in k}  # "unlike 429 rate_limited": n
        return (f"{sum(w.ended for w in likers)} likers walks ({sum(len(w.pages) for w in likers)} pages, "
                f"{self._early_filled()} filled while other shards held prefetched rows not popped), "
                f"{sum(w.ended for w in mine)} my-likes walks ({sum(len(w.pages) for w in mine)} pages); during the "
                f"walks: {churn['unlike']} unlikes, {churn['re-like']} re-likes, {churn['privacy']} privacy switches"
                + (f"; churn answered otherwise: {refused}" if refused else ""))

    def _early_filled(self) -> int:
        """Likers pages that filled while two shards at least were left unexhausted: every unexhausted shard but
        the one popped last still held rows it had prefetched and never popped (the merge refills a shard only
        while the page is open)."""
        return sum(1 for w in self.walks if w.kind == "likers" for p in w.pages
                   if len(p.items) == LIMIT and sum(f != BOTTOM for f in p.after) >= 2)

    # --- judge ------------------------------------------------------------------------------------------

    def judge(self, ctx: Context, fault) -> list[str]:
        failures = super().judge(ctx, fault) + [f"the drill's paging client crashed: {c}" for c in self.crashed]
        churners = {u.user_id for u in self.churners}
        for n, walk in enumerate(self.walks, 1):
            found = self._judge_likers(walk, churners) if walk.kind == "likers" else self._judge_mine(walk)
            failures += [f"{walk.kind} walk {n}: {f}" for f in found[:4]]
            if len(found) > 4:
                failures.append(f"{walk.kind} walk {n}: and {len(found) - 4} more")
        likers = [w for w in self.walks if w.kind == "likers" and w.ended]
        mine = [w for w in self.walks if w.kind == "my-likes" and w.ended]
        if not likers or not mine:
            failures.append(f"walks that ended: {len(likers)} of the likers, {len(mine)} of the liked list; the "
                            "paging was not exercised")
        if self.threads and not self._early_filled():
            failures.append("no likers page filled while other shards held prefetched rows: the cursor rule was not "
                            "exercised")
        churn = sum((w.churn for w in self.walks), Counter())
        missing = [a for a in ("unlike", "re-like", "privacy") if not churn[a]]
        if self.threads and missing:
            failures.append(f"no {', '.join(missing)} took place during the walks")
        odd = {k: v for k, v in self.churned.items() if " " in k and " 429 " not in f" {k} "}
        if odd:
            failures.append(f"the churn's commands answered {odd}")
        return failures + self._refreshed()

    def _judge_likers(self, walk: Walk, churners: set[int]) -> list[str]:
        """REV-7 page by page, then the walk: no repeat, no liked-throughout liker missing, an end."""
        stable = {u: key for u, (state, version, key) in walk.facts_before.items() if state == LIKED
                  and walk.facts_after.get(u) == (state, version, key) and u not in churners}
        out, seen = [], Counter()
        for k, page in enumerate(walk.pages, 1):
            returned = {u for u, _at in page.items}
            seen.update(u for u, _at in page.items)
            for s, (old, new) in enumerate(zip(page.before, page.after, strict=True)):
                if new > old:
                    out.append(f"page {k}: shard {s}'s frontier moved up, {old} -> {new}")
                if new not in (old, BOTTOM, TOP) and new[1] not in returned and new[1] not in churners:
                    out.append(f"page {k}: shard {s}'s frontier {new} names liker {new[1]}, whom the page did not "
                               "return and who was never hidden")
                passed = sorted(u for u, key in stable.items() if walk.shard_of.get(u) == s and new <= key < old
                                and u not in returned)
                if passed:
                    out.append(f"page {k}: shard {s}'s frontier moved {old} -> {new} past likers {passed} liked "
                               "throughout but not returned (a prefetched, unpopped row advanced the cursor)")
        out += self._walk_end(walk, seen, set(stable))
        return out

    def _judge_mine(self, walk: Walk) -> list[str]:
        """LIST-6 page by page (the cursor is the last row scanned: the last returned when the page filled; it
        never passes a liked-throughout video unreturned), then the walk."""
        stable = {v: key for v, (state, version, key) in walk.facts_before.items() if state == LIKED
                  and walk.facts_after.get(v) == (state, version, key)}
        out, seen = [], Counter()
        for k, page in enumerate(walk.pages, 1):
            seen.update(page.items)
            if len(page.items) == LIMIT and page.after != BOTTOM and page.after[1] != page.items[-1]:
                out.append(f"page {k}: the page filled with {page.items} but its cursor is at {page.after[1]}")
            passed = sorted(v for v, key in stable.items() if page.after <= key < page.before
                            and v not in page.items)
            if passed:
                out.append(f"page {k}: the cursor moved {page.before} -> {page.after} past {passed}, liked "
                           "throughout but not returned")
        out += self._walk_end(walk, seen, set(stable))
        return out

    def _walk_end(self, walk: Walk, seen: Counter, stable: set) -> list[str]:
        out = [walk.error] if walk.error else []
        twice = sorted(str(x) for x, n in seen.items() if n > 1)
        if twice:
            out.append(f"returned twice within one walk: {twice}")
        if not walk.ended and not walk.error:
            out.append(f"did not end within {MAX_PAGES} pages")
        elif walk.ended and stable - set(seen):
            out.append(f"{sorted(map(str, stable - set(seen)))} liked throughout the walk but never returned")
        return out

    def _refreshed(self) -> list[str]:
        """REV-9, LIST-4: once the churn stopped, a refreshed walk of each list equals the facts (likers newest
        first, less those hidden from the author; the liked list by its own order)."""
        if self.video is None:
            return []
        from relations.selectors.privacy import hidden_likers

        api = DrillApi()

        def expected():
            facts = self._facts("likers")
            hidden = hidden_likers(caller_id=self.author.user_id, user_ids=set(facts))
            liked = sorted((key for u, (state, _v, key) in facts.items() if state == LIKED and u not in hidden),
                           reverse=True)
            mine = sorted((key for state, _v, key in self._facts("my-likes").values() if state == LIKED),
                          reverse=True)
            return [u for _t, u in liked], [v for _t, v in mine]

        def converged():
            want = expected()
            got = (self._walk_all(api, "likers"), self._walk_all(api, "my-likes"))
            return (want, got) if want == got else None

        if wait_until(converged, timeout_s=60, poll_s=0.5):
            return []
        want = expected()
        got = (self._walk_all(api, "likers"), self._walk_all(api, "my-likes"))
        return [f"after the churn stopped the lists did not converge to the facts within 60 s: likers {got[0]} vs "
                f"{want[0]}, liked list {got[1]} vs {want[1]}"]
