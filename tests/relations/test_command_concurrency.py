"""Real threads against the real shards: the database constraints and row locks, not luck, keep
one relation consistent (CMD-7, CMD-8, consistency-techniques I4)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connections

from relations.errors import IdempotencyKeyReused
from relations.services.commands import relation_set_state
from tests.relations.helpers import command_rows, outbox_rows, relation_row

pytestmark = [pytest.mark.topology, pytest.mark.schema, pytest.mark.django_db(databases="__all__", transaction=True)]

N = 12


def run_concurrently(fns: list[Callable[[], object]]) -> list[object]:
    """Start every callable at the same instant; return each result or the exception it raised."""
    barrier = threading.Barrier(len(fns))
    results: list[object] = [None] * len(fns)

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fns[i]()
        except Exception as exc:  # collected and asserted on by the caller
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    return results


def command(user, video_id, desired, key):
    return lambda: relation_set_state(user_id=user.pk, video_id=video_id, desired_state=desired, operation_id=key)


@pytest.fixture
def viewer_and_video(make_user, make_video):
    return make_user(), make_video("hot-1", make_user())


def test_n_concurrent_requests_with_one_key_change_the_relation_once(viewer_and_video):
    viewer, video = viewer_and_video
    results = run_concurrently([command(viewer, video.video_id, "LIKED", "same-key")] * N)
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors == []
    assert {(r.result.state, r.result.relation_version) for r in results} == {("LIKED", 1)}
    assert sum(1 for r in results if not r.replayed) == 1
    assert relation_row(viewer.pk, video.video_id).relation_version == 1
    assert len(outbox_rows(viewer.pk, video.video_id)) == 1
    assert len(command_rows(viewer.pk)) == 1


def test_n_alternating_commands_give_gapless_versions_and_one_event_each(viewer_and_video):
    viewer, video = viewer_and_video
    fns = [command(viewer, video.video_id, "LIKED" if i % 2 == 0 else "UNLIKED", f"op-{i}") for i in range(N)]
    results = run_concurrently(fns)
    assert [r for r in results if isinstance(r, Exception)] == []
    changed_versions = sorted(r.result.relation_version for r in results if r.changed)
    k = relation_row(viewer.pk, video.video_id).relation_version
    assert k >= 1
    assert changed_versions == list(range(1, k + 1))  # no gaps, no duplicates
    events = outbox_rows(viewer.pk, video.video_id)
    assert [e.relation_version for e in events] == list(range(1, k + 1))
    # absolute states alternate from UNLIKED v0: odd versions are LIKED, even are UNLIKED
    assert all(e.payload["absoluteState"] == ("LIKED" if e.relation_version % 2 else "UNLIKED") for e in events)
    assert len(command_rows(viewer.pk)) == N


def test_concurrent_first_likes_with_different_keys_insert_one_row(viewer_and_video):
    viewer, video = viewer_and_video
    results = run_concurrently([command(viewer, video.video_id, "LIKED", f"k-{i}") for i in range(N)])
    assert [r for r in results if isinstance(r, Exception)] == []
    assert sum(1 for r in results if r.changed) == 1
    assert {r.result.relation_version for r in results} == {1}
    assert len(outbox_rows(viewer.pk, video.video_id)) == 1


def test_concurrent_key_reuse_across_videos_lets_exactly_one_win(make_user, make_video):
    viewer, author = make_user(), make_user()
    videos = [make_video(f"v-{i}", author) for i in range(N)]
    results = run_concurrently([command(viewer, v.video_id, "LIKED", "one-key") for v in videos])
    winners = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, IdempotencyKeyReused)]
    assert len(winners) == 1 and len(refused) == N - 1
    liked = [v.video_id for v in videos if relation_row(viewer.pk, v.video_id) is not None]
    assert liked == [winners[0].video_id]
    assert len(command_rows(viewer.pk)) == 1
