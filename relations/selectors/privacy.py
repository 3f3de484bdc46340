"""Reads of the privacy rules (PRIV, REV-6): a user's settings, who among some likers a caller must
not see, whether a video's likers are public, and another user's liked list. Reads only; never writes,
never opens a transaction. The writes are `relations.services.privacy`."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import Q

from relations import selectors, validation
from relations.errors import LikesPrivate, UserNotFound
from relations.models import (
    AccountRiskLevel,
    AccountStatus,
    AccountStatusValue,
    Block,
    UserPrivacy,
    VideoLikersVisibility,
)
from relations.selectors import my_likes as selectors_my_likes


@dataclass(frozen=True)
class PrivacySettings:
    likes_private: bool
    likers_public: bool

    def as_dict(self) -> dict:
        return {"likesPrivate": self.likes_private, "likersPublic": self.likers_public}


DEFAULTS = PrivacySettings(likes_private=False, likers_public=False)


def user_privacy_get(*, user_id: int) -> PrivacySettings:
    """The user's settings; no row means the defaults (likes visible, likers not public)."""
    row = UserPrivacy.objects.filter(user_id=user_id).values_list("likes_private", "likers_public").first()
    return DEFAULTS if row is None else PrivacySettings(*row)


def user_liked_page_list(*, caller_id: int, username: str, limit: int,
                         cursor: str | None) -> tuple[int, selectors_my_likes.LikedPage]:
    """One page of another user's liked list: the my-likes selector for that user, with the cursor bound
    to the LISTED user. 404 `user_not_found` for an unknown, deleted or banned user; 403 `likes_private`
    when the user made likes private. The owner always sees their own list. Items on videos the caller
    may not see (friends-only, blocked) are dropped from the page after the scan, like filtered videos
    (a short page with a moving cursor is already part of the list contract)."""
    # A name PostgreSQL cannot hold as text (NUL, a lone surrogate) names no user; asking the database
    # would fail in the driver, a 5xx for a bad URL.
    owner_id = (get_user_model().objects.filter(username=username).values_list("pk", flat=True).first()
                if validation.storable_text(username) else None)
    if owner_id is None:
        raise UserNotFound()
    if owner_id != caller_id:
        if AccountStatus.objects.filter(user_id=owner_id).exclude(status=AccountStatusValue.ACTIVE).exists():
            raise UserNotFound()
        if user_privacy_get(user_id=owner_id).likes_private:
            raise LikesPrivate()
    after = None if cursor is None else selectors_my_likes.list_cursor_decode(user_id=owner_id, cursor=cursor)
    page = selectors_my_likes.liked_page_list(user_id=owner_id, limit=limit, after=after)
    if owner_id != caller_id and page.items:
        visible = selectors.videos_visible_to(user_id=caller_id, video_ids=[i.video_id for i in page.items])
        page = selectors_my_likes.LikedPage(items=[i for i in page.items if visible[i.video_id]],
                                        next_key=page.next_key, scanned=page.scanned)
    return owner_id, page




def hidden_likers(*, caller_id: int, user_ids: set[int]) -> set[int]:
    """Who among these likers the caller must not see (REV-6): private likes (except the caller),
    banned or deleted accounts, users the caller has blocked. One query on `default` (a UNION of
    three indexed lookups), whatever the number of ids."""
    if not user_ids:
        return set()
    ids = list(user_ids)
    private = (UserPrivacy.objects.filter(user_id__in=ids, likes_private=True).exclude(user_id=caller_id)
               .values_list("user_id", flat=True))
    inactive = (AccountStatus.objects.filter(user_id__in=ids).exclude(status=AccountStatusValue.ACTIVE)
                .values_list("user_id", flat=True))
    blocked = Block.objects.filter(blocker_id=caller_id, blocked_id__in=ids).values_list("blocked_id", flat=True)
    return set(private.union(inactive, blocked))


def likers_public(*, video_id: str, author_id: int) -> bool:
    """Whether anyone who may see the video may see its likers: the per-video override wins over the
    author's setting; both default to not public."""
    override = VideoLikersVisibility.objects.filter(video_id=video_id).values_list("likers_public", flat=True).first()
    if override is None:
        override = UserPrivacy.objects.filter(user_id=author_id).values_list("likers_public", flat=True).first()
    return bool(override)


def account_risk_level(*, user_id: int) -> str:
    """The account's risk level (`AccountRiskLevel`; none when it has no status row). One primary-key read."""
    level = AccountStatus.objects.filter(user_id=user_id).values_list("risk_level", flat=True).first()
    return level or AccountRiskLevel.NONE


def policy_hidden_user_ids() -> list[int]:
    """Every account whose likes are out of public counts (`policy_hidden_count`): banned, down-weighted or frozen.
    Bounded by the accounts risk control acted on; read once per display snapshot refresh."""
    return list(AccountStatus.objects.filter(Q(status=AccountStatusValue.BANNED) | Q(
        risk_level__in=[AccountRiskLevel.DOWNWEIGHT, AccountRiskLevel.FREEZE])).order_by("user_id")
        .values_list("user_id", flat=True))
