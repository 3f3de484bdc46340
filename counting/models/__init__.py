"""The count projection, the display counts and their Redis cache's generations, and the reverse
(who liked) index. One module per concern; every model is importable from `counting.models`."""

from counting.models.display import CountCacheGeneration, CountRefreshSwitch, VideoDisplayCount
from counting.models.migration import BucketMigration, MigrationState
from counting.models.projection import (
    CountBucketRoute,
    CountBucketSpace,
    CountConsumerFence,
    CountEventReceipt,
    CountGenerationFence,
    CountProjectionGeneration,
    CountRouteFence,
    CountRouteManifest,
    CountRouteManifestItem,
    DirtyVideo,
    FenceState,
    LikeCountProjection,
    ManifestStatus,
    ProjectionGenerationStatus,
    VideoLikeCountVbucket,
)
from counting.models.retire import RetirementStatus, VideoRetirement, VideoRetirementScan
from counting.models.reverse import (
    LikeReverseProjection,
    LikeReverseRecent,
    LikeReverseSort,
    ReverseEventReceipt,
    ReverseIndexGeneration,
)

__all__ = [
    "BucketMigration",
    "CountBucketRoute",
    "CountBucketSpace",
    "CountCacheGeneration",
    "CountConsumerFence",
    "CountEventReceipt",
    "CountGenerationFence",
    "CountProjectionGeneration",
    "CountRefreshSwitch",
    "CountRouteFence",
    "CountRouteManifest",
    "CountRouteManifestItem",
    "DirtyVideo",
    "FenceState",
    "LikeCountProjection",
    "LikeReverseProjection",
    "LikeReverseRecent",
    "LikeReverseSort",
    "ManifestStatus",
    "MigrationState",
    "ProjectionGenerationStatus",
    "RetirementStatus",
    "ReverseEventReceipt",
    "ReverseIndexGeneration",
    "VideoDisplayCount",
    "VideoLikeCountVbucket",
    "VideoRetirement",
    "VideoRetirementScan",
]
