"""Local development settings (the README's run command)."""

import os

from likes_project.settings.base import *  # noqa: F403

VIDEO_SERVICE_TOKEN = os.environ.get("VIDEO_SERVICE_TOKEN", "dev-video-service-token")
