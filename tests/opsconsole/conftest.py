"""Fixtures shared by the opsconsole tests (a module that needs another shape defines its own)."""

from __future__ import annotations

import pytest
from django_celery_beat.models import IntervalSchedule, PeriodicTask


@pytest.fixture
def beat_tasks():
    """Two periodic tasks every 5 s, as beat's schedule in the database holds them: (sweep, publish)."""
    every_5s = IntervalSchedule.objects.create(every=5, period=IntervalSchedule.SECONDS)
    sweep = PeriodicTask.objects.create(name="ops-jobs-sweep", task="opsjobs.sweep", interval=every_5s)
    publish = PeriodicTask.objects.create(name="publish-outbox", task="relations.publish_all", interval=every_5s)
    return sweep, publish
