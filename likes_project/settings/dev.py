"""Local development settings (the README's run command, which also generates a private video service
token, secret key and cursor key under .data/). DEBUG defaults to true here; with DJANGO_DEBUG=false
(the benchmarks) the public development values below are refused like anywhere else."""

import os

from likes_project.settings.base import *  # noqa: F403
from likes_project.settings.base import DEV_VIDEO_SERVICE_TOKEN, env_bool, env_list
from likes_project.settings.guards import refuse_dev_secrets

DEBUG = env_bool("DJANGO_DEBUG", True)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "*")
VIDEO_SERVICE_TOKEN = os.environ.get("VIDEO_SERVICE_TOKEN", DEV_VIDEO_SERVICE_TOKEN)
DEMO_FEED_ENABLED = env_bool("DEMO_FEED_ENABLED", True)  # /demo/feed on by default here (run.sh)

refuse_dev_secrets(globals())
