"""Account deletion (issue 5 §3): the account is hidden at once, then every like it holds is withdrawn
by a versioned UNLIKED command, so counts and the likers index converge through the normal projectors.

Why a late like cannot resurface: (1) AccountStatus=deleted is committed FIRST, and every read path
(likers merge, another user's liked list) hides non-active accounts; (2) each withdrawal is a new
relation version, so a like event published before the deletion but consumed after it carries a LOWER
version and the projectors keep the UNLIKED state (version-gated apply, REV-2 / count projection).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework.authtoken.models import Token

from likes_project import metrics
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import RateLimited
from likes_project.nudge import nudge
from relations import routing
from relations.errors import UserNotFound
from relations.models import AccountStatus, AccountStatusValue, LikeRelation, RelationState
from relations.services import commands

logger = logging.getLogger(__name__)

ACCOUNT_DELETE_PERMISSION = "relations.change_accountstatus"
DEFAULT_PROGRESS_EVERY = 100
SCAN_CHUNK = 500


@dataclass(frozen=True)
class AccountDeleteResult:
    user_id: int
    alias: str
    already_deleted: bool  # the account was marked deleted before this run
    scanned: int  # LIKED relations found on the shard
    unliked: int  # of them, withdrawn by this run (a re-run finds none)
    rate_limit_bypassed: int  # withdrawals the per-relation limiter refused and the system path applied


def delete_operation_id(user_id: int, video_id: str) -> str:
    return f"account-delete:{user_id}:{video_id}"


def _unlike(*, user_id: int, video_id: str) -> tuple[bool, bool]:
    """Withdraw one like; returns (changed, rate_limit_bypassed).

    The public command is used so metrics, replay, the transition record and the publisher nudge behave
    as for any unlike. Its per-relation limiter guards users against flapping; deletion is a system
    action that must finish, so when the limiter refuses, the same durable transaction is applied
    through `commands._apply` (CAS + outbox + command record, without the limiter). No process-wide
    setting is flipped: an override of RATE_LIMIT_ENABLED would also disable limits for concurrent
    requests in the same process (the admin action runs inside a web worker).
    """
    op = delete_operation_id(user_id, video_id)
    try:
        out = commands.relation_set_state(user_id=user_id, video_id=video_id, desired_state=RelationState.UNLIKED,
                                          operation_id=op)
        return out.changed and not out.replayed, False
    except RateLimited:
        pass
    alias = routing.alias_for_user(user_id)
    try:
        out = commands._apply(alias=alias, user_id=user_id, video_id=video_id, desired_state=RelationState.UNLIKED,
                              operation_id=op, base_version=None, device_id="", client_sequence=None)
    except commands._DuplicateOperation:
        return False, True  # a concurrent run of the deletion withdrew it first
    metrics.inc("likes_commands_total", outcome="account_delete_bypass")
    if out.changed:
        nudge("relations.publish_outbox", alias)
    return out.changed, True


def account_mark_deleted(*, user_id: int, actor: Actor) -> bool:
    """Hide the account at once: AccountStatus deleted, login disabled, API token removed, audited
    ("account.delete"). Returns whether it was already marked. Must run inside the caller's
    transaction on `default` (the ops job that withdraws the likes is created in the same one)."""
    User = get_user_model()
    user = User.objects.select_for_update().filter(pk=user_id).first()
    if user is None:
        raise UserNotFound()
    status, _ = AccountStatus.objects.select_for_update().get_or_create(user_id=user_id)
    already = status.status == AccountStatusValue.DELETED
    if not already:
        status.status = AccountStatusValue.DELETED
        status.save(update_fields=["status", "updated_at"])
    if user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])
    Token.objects.filter(user_id=user_id).delete()
    audit_record(actor=actor, action="account.delete", target_type="user", target_id=str(user_id),
                 params={"username": user.get_username()}, outcome="resumed" if already else "applied")
    return already


@dataclass
class WithdrawProgress:
    """Where a withdrawal stands: the last video id handled (keyset) and the counts so far."""

    last: str = ""
    scanned: int = 0
    unliked: int = 0
    bypassed: int = 0
    finished: bool = False


def account_likes_withdraw_chunk(*, user_id: int, at: WithdrawProgress, limit: int = SCAN_CHUNK) -> WithdrawProgress:
    """Withdraw the next `limit` LIKED relations of a deleted account after `at.last`, each with its own
    versioned UNLIKED command. Keyset by video_id over the (user_id, video_id) unique index; rows this
    run unlikes drop out of the LIKED filter, which the keyset does not depend on.

    Idempotency: each withdrawal uses operation id `account-delete:<user>:<video>`, so redoing a chunk
    replays the finished ones."""
    alias = routing.alias_for_user(user_id)
    chunk = list(LikeRelation.objects.using(alias).filter(user_id=user_id, state=RelationState.LIKED,
                                                          video_id__gt=at.last)
                 .order_by("video_id").values_list("video_id", flat=True)[:limit])
    out = WithdrawProgress(at.last, at.scanned, at.unliked, at.bypassed, finished=not chunk)
    for video_id in chunk:
        changed, limited = _unlike(user_id=user_id, video_id=video_id)
        out.scanned += 1
        out.unliked += changed
        out.bypassed += limited
        out.last = video_id
    return out


def account_delete(*, user_id: int, actor: Actor, progress: Callable[[int, int], None] | None = None,
                   progress_every: int = DEFAULT_PROGRESS_EVERY) -> AccountDeleteResult:
    """Delete an account's likes in this process: mark it deleted (hidden from reads at once, login
    disabled, API token removed), then withdraw every LIKED relation with a versioned UNLIKED command.
    The admin and `delete_account` run the same steps as an ops job (`account.delete`).

    Transaction: first one durable transaction on `default` (status, user.is_active, token, audit
    record); then one durable transaction per relation on the user's shard (the like command's own).
    Idempotency: a re-run (or a run resumed after a crash) replays finished withdrawals and only
    handles relations still LIKED. `progress(done, scanned)` is called every `progress_every`
    relations and once at the end.
    """
    with transaction.atomic(using="default", durable=True):
        already = account_mark_deleted(user_id=user_id, actor=actor)
    at = WithdrawProgress()
    reported = 0
    while not at.finished:
        at = account_likes_withdraw_chunk(user_id=user_id, at=at, limit=max(1, min(SCAN_CHUNK, progress_every)))
        if progress is not None and at.scanned - reported >= progress_every:
            reported = at.scanned
            progress(at.unliked, at.scanned)
    if progress is not None and at.scanned != reported:
        progress(at.unliked, at.scanned)
    logger.info("account %s deleted: %s of %s likes withdrawn", user_id, at.unliked, at.scanned)
    return AccountDeleteResult(user_id=user_id, alias=routing.alias_for_user(user_id), already_deleted=already,
                               scanned=at.scanned, unliked=at.unliked, rate_limit_bypassed=at.bypassed)
