"""A user's privacy settings, the per-video likers override, and who may read another user's liked
list (issue 5 §3, PRIV).

The settings are enforced at read time: the likers merge hides private-likes users
(`relations.selectors_likers`), and `user_liked_page_list` below refuses another user's private list.
The read helpers live here, next to the writes they mirror, because the rules are one topic; they never
write and never open a transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from likes_project.errors import Forbidden
from opsconsole.services import Actor, audit_record
from relations import selectors, selectors_list, validation
from relations.errors import UserNotFound, VideoNotFound
from relations.models import AccountStatus, AccountStatusValue, UserPrivacy, VideoLikersVisibility


class NotAuthor(Forbidden):
    code = "not_author"
    default_message = "Only the author of this video may change who sees its likers."


class LikesPrivate(Forbidden):
    code = "likes_private"
    default_message = "This user keeps their likes private."


@dataclass(frozen=True)
class PrivacySettings:
    likes_private: bool
    likers_public: bool

    def as_dict(self) -> dict:
        return {"likesPrivate": self.likes_private, "likersPublic": self.likers_public}


DEFAULTS = PrivacySettings(likes_private=False, likers_public=False)


def api_actor(user_id: int) -> Actor:
    """The audit identity of an end user changing their own settings through the API."""
    return Actor(name=f"user:{user_id}", channel="api")


# --- reads -----------------------------------------------------------------------------------------


def user_privacy_get(*, user_id: int) -> PrivacySettings:
    """The user's settings; no row means the defaults (likes visible, likers not public)."""
    row = UserPrivacy.objects.filter(user_id=user_id).values_list("likes_private", "likers_public").first()
    return DEFAULTS if row is None else PrivacySettings(*row)


def user_liked_page_list(*, caller_id: int, username: str, limit: int,
                         cursor: str | None) -> tuple[int, selectors_list.LikedPage]:
    """One page of another user's liked list: the my-likes selector for that user, with the cursor bound
    to the LISTED user. 404 `user_not_found` for an unknown, deleted or banned user; 403 `likes_private`
    when the user made likes private. The owner always sees their own list. Items on videos the caller
    may not see (friends-only, blocked) are dropped from the page after the scan, like filtered videos
    (a short page with a moving cursor is already part of the list contract)."""
    owner_id = get_user_model().objects.filter(username=username).values_list("pk", flat=True).first()
    if owner_id is None:
        raise UserNotFound()
    if owner_id != caller_id:
        if AccountStatus.objects.filter(user_id=owner_id).exclude(status=AccountStatusValue.ACTIVE).exists():
            raise UserNotFound()
        if user_privacy_get(user_id=owner_id).likes_private:
            raise LikesPrivate()
    after = None if cursor is None else selectors_list.list_cursor_decode(user_id=owner_id, cursor=cursor)
    page = selectors_list.liked_page_list(user_id=owner_id, limit=limit, after=after)
    if owner_id != caller_id and page.items:
        visible = selectors.videos_visible_to(user_id=caller_id, video_ids=[i.video_id for i in page.items])
        page = selectors_list.LikedPage(items=[i for i in page.items if visible[i.video_id]],
                                        next_key=page.next_key, scanned=page.scanned)
    return owner_id, page


# --- writes ----------------------------------------------------------------------------------------


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
