"""The subscription-stall drill (issue 31 §1) on a real Celery worker and beat, as tests/test_drills.py runs the
others: a stalled subscription holds the log, its alert fires, it catches up with no gap (judged in the verdict),
and the drill retires it. Topology-independent: the subscription's bookkeeping is the checkpoint table on `default`
and a read of each stream partition, the same on either topology, so it runs once (the `single` pass), on the
drills' worker after them (`tests/passes.py` JOINS), never beside another drill."""

from __future__ import annotations

import pytest

from tests.test_drills import run

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]


def test_subscription_stall(settings):
    from likes_project.subscriptions.models import Subscription

    settings.LIKES_DRILLS_ENABLED = True
    verdict = run("subscription-stall")
    assert "stops reading" in verdict.injected[0] and "fired" in verdict.recovered[0]
    assert set(verdict.phases["fault"]["commands"]) == {"200"}
    assert set(Subscription.objects.values_list("status", flat=True)) == {"RETIRED"}
