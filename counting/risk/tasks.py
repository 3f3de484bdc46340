"""The risk scorer's Celery tasks (consumer `risk`): one bounded pass over one stream partition (nudged by the
publisher like every consumer's) and the beat sweeper over every partition, named `riskscore.*`, which the task
routes send to the queue `risk`: a scoring backlog waits there without holding up the count queues (DEG-2). In the
default pass groups (D143) the notifications' pass task makes the risk passes too, on the queue `notify`."""

from __future__ import annotations

from counting.risk.scorer import RiskScorer
from likes_project.eventlog.consumer import consumer_tasks

project_risk_task, project_risk_all_task = consumer_tasks(
    RiskScorer, name="riskscore.project_partition", sweep_name="riskscore.project_all", batch_size=lambda: 500)
