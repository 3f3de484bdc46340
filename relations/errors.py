from likes_project.errors import Conflict, Forbidden, NotFound, RateLimited, ServiceUnavailable, UserNotFound  # noqa: F401


class VideoNotFound(NotFound):
    code = "video_not_found"
    default_message = "No such video, or you cannot see it."


class VideoTakenDown(Forbidden):
    code = "video_taken_down"
    default_message = "The video has been taken down and accepts no new likes."


class VideoFriendsOnly(Forbidden):
    code = "video_friends_only"
    default_message = "Only the author's friends may like this video."


class BlockedByAuthor(Forbidden):
    code = "blocked_by_author"
    default_message = "The author of this video does not accept likes from you."


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"
    default_message = "This Idempotency-Key was already used for another video or desired state."


class StaleBaseVersion(Conflict):
    code = "stale_base_version"
    default_message = "baseVersion does not match the current relation version."


class OperationNotFound(NotFound):
    code = "operation_not_found"
    default_message = "No operation with this id for you."


class NotAuthor(Forbidden):
    code = "not_author"
    default_message = "Only the author of this video may change who sees its likers."


class LikesPrivate(Forbidden):
    code = "likes_private"
    default_message = "This user keeps their likes private."


class LikesReadOnly(ServiceUnavailable):
    code = "likes_read_only"
    default_message = "Likes are read-only for a while (operator switch); nothing was changed. Retry later."


class BehaviourLimited(RateLimited):
    """RISK-1 layer 2: a behaviour window is past its threshold (`signal`: toggles, videos_per_minute,
    devices_per_hour); refused before the transaction, with the current relation."""

    code = "behaviour_limited"
    default_message = "This account's recent activity is past what the service accepts; retry later."


class AccountFrozen(Forbidden):
    """RISK-3: a frozen account's commands are refused and write nothing, until an approved decision clears it."""

    code = "account_frozen"
    default_message = "This account is frozen by risk control; its likes cannot change."
