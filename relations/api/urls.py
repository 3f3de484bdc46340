from django.urls import path

import likes_project.converters  # noqa: F401 - registers "anyseg"
from relations.api import views
from relations.api.list_views import MyLikesView, UserLikesView
from relations.api.privacy_views import MyPrivacyView, VideoLikersVisibilityView

urlpatterns = [
    path("videos/<anyseg:video_id>/like-relation", views.LikeRelationView.as_view(), name="like-relation"),
    path("like-operations/<str:operation_id>", views.LikeOperationView.as_view(), name="like-operation"),
    path("me/likes", MyLikesView.as_view(), name="my-likes"),
    path("me/privacy", MyPrivacyView.as_view(), name="my-privacy"),
    path("videos/<anyseg:video_id>/likers-visibility", VideoLikersVisibilityView.as_view(),
         name="video-likers-visibility"),
    path("users/<str:username>/likes", UserLikesView.as_view(), name="user-likes"),
]

internal_urlpatterns = [
    path("videos/<str:video_id>", views.InternalVideoView.as_view(), name="internal-video"),
]
