"""An account's risk level (RISK-3, issue 32 §1), set by an operator and approved by another, as hides are: the
same decision table, approval, version sequence and apply job (`counting.risk.services`).

- down-weight: the relations stay; their likes leave the public counts (`policy_hidden_count`);
- freeze: that, and the account's commands answer 403 `account_frozen` and write nothing;
- clear: back to none; the likes come back exactly.

Applying a decision sets the level on the account's status row at the decision's risk version (only over an older
one), then marks every video the account has LIKED dirty on the partition holding the like, so the display snapshot
takes the new policy-hidden count within the convergence window. A re-run does the same again, harmlessly."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections, transaction
from django.utils import timezone

from counting import routing
from counting.models import DirtyVideo, LikeCountProjection
from counting.risk import services
from counting.risk.models import RiskDecision, RiskKind, RiskStatus
from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.errors import InvalidInput
from relations.models import AccountRiskLevel
from relations.services.accounts import account_risk_level_set

LEVELS = {"downweight": AccountRiskLevel.DOWNWEIGHT, "freeze": AccountRiskLevel.FREEZE, "clear": AccountRiskLevel.NONE}


def risk_account_request(*, actor: Actor, username: str, level: str, reason: str, evidence: str = "") -> RiskDecision:
    """AWAITING_APPROVAL: set `username`'s level (downweight, freeze or clear). Refused with a code, nothing written:
    an unknown level or user, no reason, an unnamed operator. Transaction: the decision and its audit record."""
    reason = services.text_checked(reason, what="reason", code="reason_required", limit=services.REASON_MAX,
                                   required=True)
    evidence = services.text_checked(evidence, what="evidence", code="evidence_too_long",
                                     limit=services.EVIDENCE_MAX, required=False)
    services.named_actor(actor)
    if level not in LEVELS:
        raise InvalidInput(f"The level is one of {', '.join(LEVELS)}.", code="invalid_level")
    user_id = get_user_model().objects.filter(username=(username or "").strip()).values_list("pk", flat=True).first()
    if user_id is None:
        raise InvalidInput(f"Unknown users: {username}", code="unknown_user", unknown=[username])
    params = {"kind": RiskKind.ACCOUNT, "video": "", "users": [user_id], "level": LEVELS[level], "reason": reason,
              "evidence": evidence, "restores": None}
    return services.decision_create(actor, params)


def _videos_mark_dirty(user_id: int) -> int:
    """Every video the account LIKED in the active generation, marked dirty on the partition holding the like.
    Transaction: one per count partition. Returns how many marks."""
    gen = routing.active()
    now = timezone.now()
    marked = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {DirtyVideo._meta.db_table} AS d (generation, video_id, source_partition, dirty_seq, "
                "first_dirty_at, last_dirty_at) SELECT DISTINCT %s, video_id, 0, 1, %s, %s "
                f"FROM {LikeCountProjection._meta.db_table} WHERE generation = %s AND user_id = %s "
                "AND projected_state = 'LIKED' ORDER BY 2 ON CONFLICT (generation, video_id, source_partition) "
                "DO UPDATE SET dirty_seq = d.dirty_seq + 1, last_dirty_at = EXCLUDED.last_dirty_at",
                [gen.generation, now, now, gen.generation, user_id])
            marked += cursor.rowcount
    return marked


def account_level_apply(decision_id: int) -> RiskDecision:
    """The apply job's work for an approved ACCOUNT decision (one user, one step): the level, the dirty marks, then
    APPLIED and its audit record. A re-run sets nothing older and marks again, harmlessly."""
    decision = services.risk_get(decision_id)
    [user_id] = decision.user_ids
    changed = account_risk_level_set(user_id=user_id, level=decision.params["level"],
                                     risk_version=decision.risk_version)
    outcome = {"user": user_id, "level": decision.params["level"], "changed": changed,
               "videosMarked": _videos_mark_dirty(user_id), "riskVersion": decision.risk_version}
    with transaction.atomic(using="default", durable=True):
        RiskDecision.objects.filter(pk=decision.pk).update(status=RiskStatus.APPLIED, finished_at=timezone.now(),
                                                           applied_users=1)
        audit_record(actor=system_actor(services.EXECUTOR), action="risk.account.apply",
                     target_type="risk_decision", target_id=str(decision.pk), params=outcome)
    return services.risk_get(decision.pk)
