"""A Python client of the likes service's public /v1 API (see README.md)."""

from likes_client._client import LikesClient
from likes_client._errors import LikesError, RateLimited
from likes_client._models import LIKED, UNLIKED, LikedVideo, Liker, Relation, VideoState

__all__ = ["LIKED", "UNLIKED", "LikedVideo", "Liker", "LikesClient", "LikesError", "RateLimited", "Relation",
           "VideoState"]
__version__ = "0.1.0"
