from django.urls import path

import likes_project.converters  # noqa: F401 - registers "anyseg"
from counting.api import views

urlpatterns = [
    path("videos/<anyseg:video_id>/like-count", views.LikeCountView.as_view(), name="like-count"),
]
