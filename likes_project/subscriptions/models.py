"""A subscription: one downstream team's governed way into the event log (issue 31 §1).

Its position in each stream partition is a consumer checkpoint row named `sub:<name>` (the event log's own
bookkeeping), so trimming, archiving and the lost-tail check hold back for it exactly as for an internal
consumer while it is ACTIVE or PAUSED. Once BEHIND_RETENTION (or RETIRED) its rows are gone and the log moves
on; the position it had is kept here (`position`)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from likes_project.model_kit import ApprovalRequest, approval_checks


class SubscriptionStatus(models.TextChoices):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"  # reads refused; its position still holds the log back (until its lag passes the limit)
    BEHIND_RETENTION = "BEHIND_RETENTION"  # it fell too far behind: no longer holds the log; replay from the archive
    REPLAYING = "REPLAYING"  # an approved replay copies what it missed from the archive; reads wait (409)
    RETIRED = "RETIRED"  # for good: token refused, position dropped


class Subscription(models.Model):
    name = models.CharField(max_length=64, unique=True)
    owner = models.CharField(max_length=150)  # the team that consumes it
    purpose = models.TextField()
    fields = models.JSONField()  # the event fields it may receive (PRIV-1), e.g. ["videoId", "state", ...]
    start_from = models.CharField(max_length=8)  # "earliest" | "latest": where it started reading
    # Its retention policy: how far behind (seconds) it may fall before it stops holding the log back.
    max_lag_s = models.FloatField()
    alert_lag_s = models.FloatField()  # past this lag an alert fires (before it falls behind its retention)
    status = models.CharField(max_length=20, choices=SubscriptionStatus.choices, default=SubscriptionStatus.ACTIVE)
    token_hash = models.CharField(max_length=64, unique=True)  # sha256 of its token; the token is shown once
    pseudonym_key = models.CharField(max_length=64)  # keys its user pseudonyms (HMAC-SHA256), its own
    position = models.JSONField(default=dict, blank=True)  # {partition: last acked id} when not in checkpoints
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    status_changed_at = models.DateTimeField(auto_now_add=True)
    status_reason = models.TextField(blank=True, default="")
    last_ack_at = models.DateTimeField(null=True, blank=True)
    notices_acked = models.BigIntegerField(default=0)  # the last of its notices it acknowledged (their ids grow)

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(start_from__in=["earliest", "latest"]),
                                              name="subscription_start_from_known")]
        permissions = [("manage_subscription", "Can create, pause, resume and retire subscriptions")]

    def __str__(self) -> str:
        return f"subscription {self.name} ({self.status})"

    @property
    def consumer(self) -> str:
        """Its name among the event log's checkpoints."""
        return consumer_name(self.name)


def consumer_name(name: str) -> str:
    return f"sub:{name}"


class SubscriptionNotice(models.Model):
    """An event for one subscription that is not on the log, served before the log's events of the same pull and
    dropped once acknowledged (their ids grow):
    - an account's deletion (PRIV-4), written in the deletion's own transaction for every subscription that
      receives user ids or pseudonyms (`event` empty);
    - a relation event the subscription missed while it was BEHIND_RETENTION, copied back from the outbox
      archive by an approved replay (`event`: the event as the log carried it)."""

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="notices")
    event_id = models.UUIDField()
    type = models.CharField(max_length=32)  # "account.deleted" | "like.relation_changed"
    user_id = models.BigIntegerField(null=True)  # shaped per subscription when served (the id, or its pseudonym)
    at = models.DateTimeField()
    event = models.JSONField(null=True, blank=True)  # a replayed relation event, as the log carried it

    class Meta:
        constraints = [models.UniqueConstraint(fields=["subscription", "event_id"], name="uniq_subscription_notice")]
        indexes = [models.Index(fields=["subscription", "id"], name="subscription_notice_pos_idx")]

    def __str__(self) -> str:
        return f"{self.type} of user {self.user_id} for subscription {self.subscription_id}"


class ReplayStatus(models.TextChoices):
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    APPROVED = "APPROVED"  # its job is queued or running
    DONE = "DONE"
    FAILED = "FAILED"
    REJECTED = "REJECTED"


class SubscriptionReplay(ApprovalRequest):
    """A request to replay a BEHIND_RETENTION subscription from the outbox archive (issue 31 §1): requested by
    one operator, approved by another (`likes_project.approvals`: bound to the parameters' hash, never by the
    requester, checked by the database too), then run by the system as the ops job `subscription.replay`.
    `params`: `{"subscription", "from": {partition: id}, "reason"}`."""

    finished_statuses = (ReplayStatus.DONE, ReplayStatus.FAILED, ReplayStatus.REJECTED)

    subscription = models.ForeignKey(Subscription, on_delete=models.PROTECT, related_name="replays")
    rejected_by = models.CharField(max_length=150, blank=True, default="")
    status = models.CharField(max_length=20, choices=ReplayStatus.choices, default=ReplayStatus.AWAITING_APPROVAL)
    replayed = models.BigIntegerField(default=0)  # events copied back

    class Meta(ApprovalRequest.Meta):
        constraints = approval_checks("subscription_replay")
        permissions = [("approve_subscriptionreplay", "Can approve a subscription's replay from the archive")]

    def __str__(self) -> str:
        return f"replay {self.pk} of {self.subscription_id} ({self.status})"
