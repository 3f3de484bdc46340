"""Likers privacy and account status (read by the likers API in counting), and the read-only switch."""

from __future__ import annotations

from django.db import models

from likes_project.switches import GlobalPauseSwitch


class UserPrivacy(models.Model):
    """A user's privacy settings on `default`; a missing row means the defaults (likes visible, own
    videos' likers not public). `likes_private` hides the user from other users' likers lists;
    `likers_public` is the author's per-author "anyone may see who liked my videos" setting."""

    user_id = models.BigIntegerField(primary_key=True)
    likes_private = models.BooleanField(default=False)
    likers_public = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "user privacy settings"

    def __str__(self) -> str:
        return f"privacy of {self.user_id} (likes_private={self.likes_private}, likers_public={self.likers_public})"


class VideoLikersVisibility(models.Model):
    """A per-video override of the author's `likers_public` setting."""

    video_id = models.CharField(max_length=64, primary_key=True)
    likers_public = models.BooleanField()

    class Meta:
        verbose_name_plural = "video likers visibility overrides"

    def __str__(self) -> str:
        return f"{self.video_id} likers_public={self.likers_public}"


class AccountStatusValue(models.TextChoices):
    ACTIVE = "active"
    BANNED = "banned"
    DELETED = "deleted"


class AccountRiskLevel(models.TextChoices):
    """RISK-3's levels after the request (issue 32 §1): the relation stays and its like leaves the public count
    (down-weight), or the account's commands are refused too (freeze). Both reversible (back to none)."""

    NONE = "none"
    DOWNWEIGHT = "downweight"
    FREEZE = "freeze"


class AccountStatus(models.Model):
    """Risk-control / lifecycle status of an account; a missing row means active, at no risk level. A banned
    account, or one down-weighted or frozen, has its likes out of public counts (`policy_hidden_count`)."""

    user_id = models.BigIntegerField(primary_key=True)
    status = models.CharField(max_length=8, choices=AccountStatusValue.choices, default=AccountStatusValue.ACTIVE)
    # Database defaults too: a process of the previous release inserting a row during a rolling upgrade leaves them.
    risk_level = models.CharField(max_length=10, choices=AccountRiskLevel.choices, default=AccountRiskLevel.NONE,
                                  db_default=AccountRiskLevel.NONE)
    risk_version = models.BigIntegerField(default=0, db_default=0)  # of the decision that set it: a newer one wins
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "account statuses"

    def __str__(self) -> str:
        return f"{self.user_id} {self.status}"


class LikesReadOnlySwitch(GlobalPauseSwitch):
    """Read-only likes (issue 14 §3, DEG-1 step 6): while set, every like command is refused with 503
    `likes_read_only` (the caller's current relation in the body) and writes nothing; reads are
    unaffected. One row, key "global"."""

    switch_kind = "read-only"
    switch_audit = ("likes.read_only_", "likes")
    switch_key_help = "no key (the whole service)"
    switch_states = ("SET", "off")

    class Meta:
        verbose_name, verbose_name_plural = "read-only switch", "read-only switches"
