"""The ops-job kinds of the relations app (registered in RelationsConfig.ready): the relation cache
rebuild, account deletion (the withdrawal of its likes, then the erasure of its user id: relations.services.erasure
and every registered eraser), the exact export of a user's likes and of a video's likers, and the slot move (the
ledger kit's job). Thin adapters: each slice calls the services, saves its cursor in the job and reports
progress."""

from __future__ import annotations

import logging
import os
import time

from django.conf import settings

from likes_project.audit.services import Actor
from likes_project.cursors import iso_utc
from likes_project.erasure import account_erase_everywhere
from likes_project.ledgers.jobs import ledger_job_kind
from likes_project.opsjobs.services import JobKind, SliceContext, job_files_dir
from relations import routing
from relations.models import LikeRelation, RelationState
from relations.services import accounts, erasure, export
from relations.services.relation_cache_rebuild import JOB_KIND as RELCACHE_REBUILD
from relations.services.slot_moves import ledger as slot_moves_ledger
from relations.services.slot_moves import protocol as slot_moves_protocol

ACCOUNT_DELETE = accounts.ACCOUNT_DELETE_JOB
LIKES_EXPORT = "likes.export"
logger = logging.getLogger(__name__)


# --- account deletion --------------------------------------------------------------------------------


def _account_delete_create(job, actor: Actor) -> None:
    user_id = int(job.params["user_id"])
    already = accounts.account_mark_deleted(user_id=user_id, actor=actor)  # hidden at once, in this transaction
    job.target = f"user:{user_id}"
    job.state.update(already=already, reported=0, withdrawn=False, **accounts.WithdrawProgress().as_state())


def _account_delete_slice(ctx: SliceContext) -> bool:
    """Two steps: withdraw every like (each with its versioned unlike), then, once the pipeline has applied the
    withdrawal, erase the user id (`_erase`). The job's progress counts the likes; the erasure says its own."""
    user_id = int(ctx.params["user_id"])
    name = ctx.params.get("username", str(user_id))
    if not ctx.state.get("withdrawn") and not _withdraw(ctx, user_id, name):
        return False
    return _erase(ctx, user_id, name)


def _withdraw(ctx: SliceContext, user_id: int, name: str) -> bool:
    """The withdrawal, resumed from the job's cursor; True when it is done (audited), False when the slice's time
    ran out first."""
    every = max(1, int(ctx.params.get("progress_every") or accounts.DEFAULT_PROGRESS_EVERY))
    st = ctx.state
    if ctx.job.total is None:
        liked = LikeRelation.objects.using(routing.alias_for_user(user_id)).filter(
            user_id=user_id, state=RelationState.LIKED).count()
        ctx.progress(total=st["scanned"] + liked)
    at = accounts.WithdrawProgress.from_state(st)
    while True:
        limit = max(1, min(accounts.SCAN_CHUNK, every, settings.ACCOUNT_DELETE_CHUNK))
        at = accounts.account_likes_withdraw_chunk(user_id=user_id, at=at, limit=limit)
        st.update(at.as_state())
        if (at.finished and at.scanned != st["reported"]) or at.scanned - st["reported"] >= every:
            st["reported"] = at.scanned
            ctx.say(f"{name}: {at.scanned} likes handled, {at.unliked} withdrawn...")
        ctx.progress(done=at.scanned)
        if at.finished:
            accounts.account_withdrawal_audit(user_id=user_id, actor=ctx.actor, at=at)
            now = time.time()
            st.update(withdrawn=True, erase={"since": now, "movedAt": now, "seen": None})
            ctx.save()
            return True
        left = ctx.time_left()
        if left is not None and left <= 0:
            return False


# The erasure waits for the pipeline while it moves, polled every ERASE_POLL_S, also in a worker's slice (a parked
# slice is started again at once: the poll keeps that from spinning). It stops waiting when nothing moved for
# ACCOUNT_ERASE_STALL_S (no publisher or consumer at work: a paused publisher, a stopped consumer, a DEAD event) or
# after ACCOUNT_ERASE_WAIT_MAX_S in all: the job then ends with the withdrawal done and the erasure waiting, said in
# its message and result; running the deletion again (it resumes, and finds nothing to withdraw) erases, which the
# beat does by itself (`erasure.account_erasures_resume`, every ACCOUNT_ERASE_RESUME_EVERY_S).
ERASE_POLL_S = 0.25


def _erase(ctx: SliceContext, user_id: int, name: str) -> bool:
    st = ctx.state["erase"]
    while True:
        pending = erasure.account_erasure_pending(user_id)
        if pending.ready:
            break
        now = time.time()
        seen = [pending.unpublished, pending.dead, pending.unconsumed, pending.moving,
                [[p, list(key)] for p, key in pending.position]]
        if seen != st["seen"]:
            st.update(seen=seen, movedAt=now)
        if (now - st["movedAt"] >= settings.ACCOUNT_ERASE_STALL_S
                or now - st["since"] >= settings.ACCOUNT_ERASE_WAIT_MAX_S):
            logger.warning("account deletion job %s: the erasure waits for %s", ctx.job.pk, pending.describe())
            _account_delete_result(ctx, name, {"status": "waiting", **pending.as_dict()})
            return True
        time.sleep(ERASE_POLL_S)  # polling the pipeline other processes drive: nothing to wait on
        left = ctx.time_left()
        if left is not None and left <= 0:
            ctx.save()
            return False
    at = erasure.EraseProgress.from_state(st)
    while True:
        before = at.videos
        at = erasure.account_relations_erase_chunk(user_id=user_id, at=at)
        st.update(at.as_state())
        if at.videos != before:
            ctx.say(f"{name}: user id erased from the rows of {at.videos} relations...")
        ctx.save()
        if at.finished:
            break
        left = ctx.time_left()
        if left is not None and left <= 0:
            return False
    reports = account_erase_everywhere(user_id)
    erasure.account_erasure_audit(user_id=user_id, actor=ctx.actor, at=at, erasers=reports)
    _account_delete_result(ctx, name, {"status": "done", **at.as_state(), "erasers": reports})
    return True


def _account_delete_result(ctx: SliceContext, name: str, erased: dict) -> None:
    st, user_id = ctx.state, int(ctx.params["user_id"])
    ctx.result = {"user_id": user_id, "alias": routing.alias_for_user(user_id), "already_deleted": st["already"],
                  "scanned": st["scanned"], "unliked": st["unliked"], "skipped": st["skipped"], "failed": st["failed"],
                  "failed_videos": st["failed_videos"], "erasure": erased}
    if erased["status"] == "done":
        then = f"user id erased from the rows of {erased['videos']} relations and by {len(erased['erasers'])} erasers."
    else:
        waits = erasure.Pending(erased["unpublished"], erased["dead"], erased["unconsumed"], erased["moving"])
        then = (f"user id NOT erased yet: it waits for {waits.describe()} (run the deletion again once the pipeline "
                "has caught up).")
    ctx.job.message = (f"Deleted account {name}: {st['unliked']} of {st['scanned']} likes withdrawn, "
                       f"{st['skipped']} found withdrawn, {st['failed']} refused; {then}")


ACCOUNT_DELETE_KIND = JobKind(kind=ACCOUNT_DELETE, permission=accounts.ACCOUNT_DELETE_PERMISSION,
                              run_slice=_account_delete_slice, create=_account_delete_create, unit="likes")


# --- the exact export ---------------------------------------------------------------------------------


def _job_file_write(ctx: SliceContext, name: str, unit: str, write):
    """Run `write(out, progress)` into the job's file `name` (a temporary file renamed over it at the end,
    so the file is complete or absent) and return what `write` returns."""
    target = job_files_dir() / name
    tmp = target.with_name(f".{name}.part")

    def progress(rows: int) -> None:
        ctx.say(f"{rows} {unit} exported...")
        ctx.progress(done=rows)

    try:
        with open(tmp, "w", encoding="utf-8") as out:
            result = write(out, progress)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return result


def _export_slice(ctx: SliceContext) -> bool:
    """One slice, to the end: the export is one snapshot transaction, which cannot be cut."""
    user_id = int(ctx.params["user_id"])
    name = f"likes-{ctx.params.get('username', user_id)}-job{ctx.job.pk}.jsonl"
    result = _job_file_write(ctx, name, "likes", lambda out, progress: export.user_likes_export(
        user_id=user_id, out=out, actor=ctx.actor, destination=ctx.params.get("destination", "ops job"),
        progress=progress))
    ctx.progress(done=result.row_count, total=result.row_count)
    ctx.result = {"file": name, "rowCount": result.row_count, "unlistedCount": result.unlisted_count,
                  "asOf": iso_utc(result.as_of), "shard": result.alias}
    return True


LIKES_EXPORT_KIND = JobKind(kind=LIKES_EXPORT, permission=export.EXPORT_PERMISSION, run_slice=_export_slice,
                            create=lambda job, actor: setattr(job, "target", f"user:{job.params['user_id']}"),
                            unit="likes", single_slice=True)



# --- a video's likers, for a stated purpose (OPS-9) ---------------------------------------------------

LIKERS_EXPORT = "likers.export"


def _likers_export_slice(ctx: SliceContext) -> bool:
    """One slice, to the end: each shard's part is one snapshot transaction."""
    video_id = ctx.params["video_id"]
    result = _job_file_write(ctx, f"likers-{video_id}-job{ctx.job.pk}.jsonl", "likers",
                             lambda out, progress: export.video_likers_export(
                                 video_id=video_id, purpose=ctx.params["purpose"], out=out, actor=ctx.actor,
                                 destination=ctx.params.get("destination", "ops job"), progress=progress))
    name = f"likers-{video_id}-job{ctx.job.pk}.jsonl"
    ctx.progress(done=result.row_count, total=result.row_count)
    ctx.result = {"file": name, "rowCount": result.row_count, "shards": result.shards}
    return True


LIKERS_EXPORT_KIND = JobKind(kind=LIKERS_EXPORT, permission=export.LIKERS_EXPORT_PERMISSION,
                             run_slice=_likers_export_slice,
                             create=lambda job, actor: setattr(job, "target", f"video:{job.params['video_id']}"),
                             unit="likers", single_slice=True)

# --- relation slot moves (issue 16 §3) ----------------------------------------------------------------


SLOT_MOVE_KIND = ledger_job_kind(slot_moves_ledger.LEDGER, slot_moves_protocol.move_run)
JOB_KINDS = [RELCACHE_REBUILD, ACCOUNT_DELETE_KIND, LIKES_EXPORT_KIND, LIKERS_EXPORT_KIND, SLOT_MOVE_KIND]
