"""Creator notifications on `default` (issue 31 §2): the likes of each (author, video) coalesced into fixed
windows of NOTIFY_WINDOW_S, and what the `notify` consumer needs to apply the relation events idempotently.

- `NotifyRelation`: per (author, video, user), the highest relation version applied and, while that version
  is a like that still counts, the window it counts in (the version guard and the cancel rule read it).
- `NotifyWindow`: one (author, video, window) and how many likes it holds (`new_likes`, kept in step with
  its likers in the same transaction); read by the author's list.
- `NotifyWindowLiker`: who counts in a window. Usernames are never stored: privacy is applied when read.
"""

from __future__ import annotations

from django.db import models


class NotifyRelation(models.Model):
    """The consumer's view of one relation for one author's notifications. A placeholder row (UNLIKED v0)
    means "never seen"; `window_start` / `window_end` are set only while the relation's latest applied
    version is a like counted in that window."""

    author_id = models.BigIntegerField()
    video_id = models.CharField(max_length=64)
    user_id = models.BigIntegerField()
    relation_version = models.BigIntegerField(default=0)
    state = models.CharField(max_length=8, default="UNLIKED")
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["author_id", "video_id", "user_id"],
                                               name="uniq_notify_relation")]
        indexes = [models.Index(fields=["user_id"], name="notify_relation_user_idx"),  # the account eraser
                   models.Index(fields=["updated_at"], name="notify_relation_updated_idx")]  # the retention sweep

    def __str__(self) -> str:
        return f"{self.user_id} -> {self.video_id} {self.state} v{self.relation_version}"


class NotifyWindow(models.Model):
    """The likes of one of the author's videos in one window [window_start, window_end). Listed to the
    author while `new_likes` > 0; `read_at` is when the author last marked it read, and it reads as read
    unless a like was added after that (`last_added_at`)."""

    author_id = models.BigIntegerField()
    video_id = models.CharField(max_length=64)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    new_likes = models.IntegerField(default=0)
    last_added_at = models.DateTimeField(null=True, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["author_id", "video_id", "window_start"],
                                               name="uniq_notify_window")]
        indexes = [models.Index(fields=["author_id", "-window_end", "-id"], name="notify_window_list_idx"),
                   # The retention sweep (oldest first) and its oldest(); window_start never changes once written.
                   models.Index(fields=["window_start"], name="notify_window_start_idx")]

    def __str__(self) -> str:
        return f"{self.video_id} [{self.window_start:%Y-%m-%d %H:%M:%S}, +{self.new_likes}]"

    @property
    def is_read(self) -> bool:
        return self.read_at is not None and (self.last_added_at is None or self.last_added_at <= self.read_at)


class NotifyWindowLiker(models.Model):
    """One like counted in a window: `liked_at` is the relation's stateChangedAt."""

    window = models.ForeignKey(NotifyWindow, on_delete=models.CASCADE, related_name="likers")
    user_id = models.BigIntegerField()
    liked_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["window", "user_id"], name="uniq_notify_window_liker")]
        indexes = [models.Index(fields=["window", "-liked_at", "-user_id"], name="notify_liker_recent_idx"),
                   models.Index(fields=["user_id"], name="notify_liker_user_idx")]  # the account eraser

    def __str__(self) -> str:
        return f"{self.user_id} in window {self.window_id}"
