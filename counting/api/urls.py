from django.urls import path

from counting.api import views

urlpatterns = [
    path("videos/<str:video_id>/like-count", views.LikeCountView.as_view(), name="like-count"),
]
