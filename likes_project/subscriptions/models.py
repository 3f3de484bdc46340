"""A subscription: one downstream team's governed way into the event log (issue 31 §1).

Its position in each stream partition is a consumer checkpoint row named `sub:<name>` (the event log's own
bookkeeping), so trimming, archiving and the lost-tail check hold back for it exactly as for an internal
consumer while it is ACTIVE or PAUSED. Once BEHIND_RETENTION (or RETIRED) its rows are gone and the log moves
on; the position it had is kept here (`position`)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class SubscriptionStatus(models.TextChoices):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"  # reads refused; its position still holds the log back (until its lag passes the limit)
    BEHIND_RETENTION = "BEHIND_RETENTION"  # it fell too far behind: no longer holds the log; replay from the archive
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
    """An event for one subscription that is not on the log: an account's deletion (PRIV-4), written in the
    deletion's own transaction for every subscription that receives user ids or pseudonyms. Served before the
    log's events of the same pull; dropped once acknowledged."""

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="notices")
    event_id = models.UUIDField(unique=True)
    type = models.CharField(max_length=32)  # "account.deleted"
    user_id = models.BigIntegerField()  # shaped per subscription when served (the id, or its pseudonym)
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["subscription", "id"], name="subscription_notice_pos_idx")]

    def __str__(self) -> str:
        return f"{self.type} of user {self.user_id} for subscription {self.subscription_id}"
