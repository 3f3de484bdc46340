from django.urls import path

import likes_project.converters  # noqa: F401 - registers "anyseg"
from counting.api import views
from counting.api.batch_views import BatchQueryView
from counting.api.likers_views import LikersView, RecentLikersView

urlpatterns = [
    path("videos/<anyseg:video_id>/like-count", views.LikeCountView.as_view(), name="like-count"),
    path("like-relations/batch-query", BatchQueryView.as_view(), name="like-relations-batch-query"),
    path("videos/<anyseg:video_id>/likers", LikersView.as_view(), name="video-likers"),
    path("videos/<anyseg:video_id>/likers/recent", RecentLikersView.as_view(), name="video-likers-recent"),
]
