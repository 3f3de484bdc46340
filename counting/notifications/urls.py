"""The author's notifications: `/v1/me/notifications` and `/v1/me/notifications/read` (issue 31 §2)."""

from django.urls import path

from counting.notifications.api import MyNotificationsReadView, MyNotificationsView

urlpatterns: list = [
    path("me/notifications", MyNotificationsView.as_view(), name="my-notifications"),
    path("me/notifications/read", MyNotificationsReadView.as_view(), name="my-notifications-read"),
]
