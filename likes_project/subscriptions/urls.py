"""The pull contract of subscriptions: `/internal/v1/subscriptions/<name>/events` and `/ack` (issue 31 §1)."""

from django.urls import path

import likes_project.converters  # noqa: F401 - registers "anyseg"
from likes_project.subscriptions.api import AckView, EventsView

urlpatterns = [
    path("subscriptions/<anyseg:name>/events", EventsView.as_view(), name="subscription-events"),
    path("subscriptions/<anyseg:name>/ack", AckView.as_view(), name="subscription-ack"),
]
