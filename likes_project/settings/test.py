"""Test settings: the same real PostgreSQL and Redis, two relation shards and two count partitions."""

import os

os.environ.setdefault("LIKES_REDIS_PREFIX", "likes-test")

from likes_project.settings.base import *  # noqa: F403
from likes_project.settings.base import COUNT_PARTITION_ALIASES, DATABASES, RELATION_SHARD_ALIASES

assert len(RELATION_SHARD_ALIASES) >= 2 and len(COUNT_PARTITION_ALIASES) >= 2, (
    "tests need at least two relation shards and two count partitions, so routing bugs show"
)
for _cfg in DATABASES.values():
    _cfg["CONN_MAX_AGE"] = 0

LIKES_REDIS_PREFIX = "likes-test"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
VIDEO_SERVICE_TOKEN = "test-video-service-token"
CELERY_TASK_ALWAYS_EAGER = False
# Tests drive the publisher and projectors explicitly (the real task functions), never via a broker; a
# drill that runs a real worker turns nudges back on for that worker's process only.
LIKES_NUDGE_ENABLED = os.environ.get("LIKES_TEST_NUDGES") == "1"
# Files ops jobs produce (exports) go to a private temporary directory, never into the checkout.
import tempfile  # noqa: E402

OPS_JOB_FILES_DIR = tempfile.mkdtemp(prefix="likes-test-job-files-")
