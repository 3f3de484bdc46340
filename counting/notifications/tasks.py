"""The `notify` consumer's Celery tasks: one bounded pass over one stream partition (nudged by the publisher
like every consumer's pass task) and the beat sweeper over every partition. Both are named `notifications.*`,
which the task routes send to the queue `notify`: a notification backlog waits there without holding up the
count, reverse-index and relation-cache queues (DEG-2)."""

from __future__ import annotations

from counting.notifications.projector import NotifyProjector
from likes_project.eventlog.consumer import consumer_tasks

project_notify_task, project_notify_all_task = consumer_tasks(
    NotifyProjector, name="notifications.project_partition", sweep_name="notifications.project_all",
    batch_size=lambda: 500)
