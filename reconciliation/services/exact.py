"""Running an exact check (REC-5): cut the scope, compare inside the cut's snapshots, report. One slice,
since the snapshots cannot outlive it."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from counting import routing
from reconciliation.models import CheckRun, RunStatus
from reconciliation.services import checks, evidence
from reconciliation.services.cut import CutRefused, exact_cut


def exact_run_execute(run: CheckRun, *, on_chunk=None) -> CheckRun:
    """Cut, compare every chunk of the scope inside the snapshots, then save the diffs and finish the
    run: PASSED, FAILED, or REFUSED with the reason (nothing is claimed)."""
    gen = checks.check_run_begin(run)
    videos = run.scope.get("videos")
    bucket_range = checks._bucket_range(run.scope)
    found: list[checks.Found] = []
    checked = 0
    try:
        with exact_cut(videos) as cut:
            run.barrier_held_ms = cut.held_ms
            # The watermarks of the cut itself: the shards' snapshots and outbox positions, B[p].
            run.watermarks = {**evidence.watermarks(gen, source=cut.source), "offsetVector": cut.offsets,
                              "barrier": cut.mode}
            after = ""
            while True:
                if videos is not None:
                    chunk_videos = [v for v in videos if v > after][:settings.RECONCILE_BATCH_VIDEOS]
                else:
                    chunk_videos = evidence.videos_after(after, settings.RECONCILE_BATCH_VIDEOS, gen=gen)
                if not chunk_videos:
                    break
                chunk = checks.exact_chunk(gen, chunk_videos, bucket_range=bucket_range)
                checked += chunk.checked
                found += chunk.found
                after = chunk_videos[-1]
                if on_chunk is not None:
                    on_chunk(checked)
    except CutRefused as exc:
        run.checked = checked
        return checks.check_run_finish(run, status=RunStatus.REFUSED, refused_because=str(exc))
    except routing.NoActiveGeneration as exc:
        return checks.check_run_finish(run, status=RunStatus.REFUSED, refused_because=str(exc))
    run.checked = checked
    run.diffs_found = len(found)
    with transaction.atomic(using="default", durable=True):
        checks.diffs_save(run, found)
    return checks.check_run_finish(run)
