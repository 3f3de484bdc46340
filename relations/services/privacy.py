"""Writes of a user's privacy settings and the per-video likers override (issue 5 §3, PRIV). The
settings are enforced at read time (`relations.selectors.privacy`)."""

from __future__ import annotations

from django.db import transaction

from likes_project.audit.services import Actor, audit_record
from relations import selectors, validation
from relations.errors import NotAuthor, VideoNotFound
from relations.models import UserPrivacy, VideoLikersVisibility
from relations.selectors.privacy import PrivacySettings


def user_privacy_set(*, user_id: int, likes_private: bool | None = None, likers_public: bool | None = None,
                     actor: Actor) -> PrivacySettings:
    """Change one or both of the user's privacy settings; `None` leaves a setting as it is.

    Transaction: one durable transaction on `default` (settings row + audit record).
    Idempotency: setting the current values again changes nothing but is audited as `unchanged`.
    """
    for name, value in (("likesPrivate", likes_private), ("likersPublic", likers_public)):
        if value is not None and not isinstance(value, bool):
            raise validation.InvalidInput(f"{name} must be true or false.", code="invalid_privacy")
    if likes_private is None and likers_public is None:
        raise validation.InvalidInput("Give likesPrivate and/or likersPublic.", code="invalid_privacy")
    with transaction.atomic(using="default", durable=True):
        row, _ = UserPrivacy.objects.select_for_update().get_or_create(user_id=user_id)
        before = PrivacySettings(row.likes_private, row.likers_public)
        after = PrivacySettings(before.likes_private if likes_private is None else likes_private,
                                before.likers_public if likers_public is None else likers_public)
        if after != before:
            row.likes_private, row.likers_public = after.likes_private, after.likers_public
            row.save(update_fields=["likes_private", "likers_public", "updated_at"])
        audit_record(actor=actor, action="privacy.set", target_type="user", target_id=str(user_id),
                     params=after.as_dict(), outcome="applied" if after != before else "unchanged")
    return after


def video_likers_visibility_set(*, user_id: int, video_id: str, likers_public: bool, actor: Actor) -> bool:
    """The author's per-video override of their `likers_public` setting. 404 for a video the user cannot
    see, 403 `not_author` for anyone but the author. Returns the stored value.

    Transaction: one durable transaction on `default` (override row + audit record).
    Idempotency: setting the same value again changes nothing.
    """
    if not isinstance(likers_public, bool):
        raise validation.InvalidInput("likersPublic must be true or false.", code="invalid_privacy")
    if not selectors.video_visible_to(user_id=user_id, video_id=video_id):
        raise VideoNotFound()
    if selectors.video_snapshot_get(video_id=video_id).author_id != user_id:
        raise NotAuthor()
    with transaction.atomic(using="default", durable=True):
        row = VideoLikersVisibility.objects.select_for_update().filter(video_id=video_id).first()
        changed = row is None or row.likers_public != likers_public
        VideoLikersVisibility.objects.update_or_create(video_id=video_id, defaults={"likers_public": likers_public})
        audit_record(actor=actor, action="video.likers_visibility", target_type="video", target_id=video_id,
                     params={"likersPublic": likers_public}, outcome="applied" if changed else "unchanged")
    return likers_public
