from django.urls import path

import likes_project.converters  # noqa: F401 - registers "anyseg"
from relations.api import views

urlpatterns = [
    path("videos/<anyseg:video_id>/like-relation", views.LikeRelationView.as_view(), name="like-relation"),
    path("like-operations/<str:operation_id>", views.LikeOperationView.as_view(), name="like-operation"),
]

internal_urlpatterns = [
    path("videos/<str:video_id>", views.InternalVideoView.as_view(), name="internal-video"),
]
