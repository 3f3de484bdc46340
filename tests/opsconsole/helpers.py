"""What the opsconsole tests share."""

from __future__ import annotations

from relations.services.commands import relation_set_state
from tests.factories import make_user, make_video


def liker_of_videos(prefix: str, count: int):
    """A user who liked `count` videos of another author (`<prefix>-0` …), each like committed through the
    command service: the account an account-deletion test deletes. Returns (user, video ids)."""
    author, doomed = make_user(), make_user()
    videos = [make_video(f"{prefix}-{i}", author).video_id for i in range(count)]
    for i, video_id in enumerate(videos):
        relation_set_state(user_id=doomed.pk, video_id=video_id, desired_state="LIKED", operation_id=f"{prefix}-{i}")
    return doomed, videos
