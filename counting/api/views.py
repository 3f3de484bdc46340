"""Count read API."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from counting.selectors import display_count_get
from relations import selectors as relation_selectors
from relations import validation
from relations.api.serializers import ErrorSerializer
from relations.errors import VideoNotFound


class LikeCountResponseSerializer(serializers.Serializer):
    videoId = serializers.CharField()
    displayCount = serializers.IntegerField()
    countSnapshotAt = serializers.DateTimeField(allow_null=True)
    countConsistency = serializers.CharField(default="EVENTUAL")


class LikeCountView(APIView):
    """A video's display like count, from the display snapshot (eventually consistent)."""

    @extend_schema(operation_id="like_count_get",
                   responses={200: LikeCountResponseSerializer, 400: ErrorSerializer, 401: ErrorSerializer,
                              404: ErrorSerializer})
    def get(self, request, video_id: str):
        validation.video_id(video_id)
        if not relation_selectors.video_visible_to(user_id=request.user.pk, video_id=video_id):
            raise VideoNotFound()
        count = display_count_get(video_id=video_id)
        return Response({"videoId": video_id, "displayCount": count.display_count,
                         "countSnapshotAt": count.snapshot_at, "countConsistency": "EVENTUAL"})
