"""DRF views of who liked a video (`GET /v1/videos/<videoId>/likers` and `.../likers/recent`, issue 5
§2). Validate, check the permission, call the likers selector, serialize; the rules live in
`counting.selectors.likers`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from counting.selectors import likers as selectors_likers
from relations import validation
from relations.api.serializers import PAGE_PARAMETERS, ErrorSerializer, liked_at_field, next_cursor_field

ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer}
WATERMARK_HELP = ("The reverse index holds every relation change published up to this time (UTC): the lowest "
                  "checkpoint of the reverse consumer over all stream partitions. Null before it consumed anything.")


class LikerSerializer(serializers.Serializer):
    userId = serializers.IntegerField()
    username = serializers.CharField()
    likedAt = liked_at_field()


class LikersPageSerializer(serializers.Serializer):
    items = LikerSerializer(many=True)
    nextCursor = next_cursor_field(end="when every reverse shard is exhausted",
                                   short_because="likers hidden by privacy rules")
    indexWatermark = serializers.DateTimeField(allow_null=True, help_text=WATERMARK_HELP)


class RecentLikersSerializer(serializers.Serializer):
    items = LikerSerializer(many=True)
    indexWatermark = serializers.DateTimeField(allow_null=True, help_text=WATERMARK_HELP)


class LikersView(APIView):
    """Who liked a video, newest first (REV-5 … REV-8): a live view, not a snapshot (REV-9)."""

    @extend_schema(
        operation_id="video_likers_list",
        parameters=PAGE_PARAMETERS,
        responses={200: LikersPageSerializer, **ERRORS, 410: ErrorSerializer},
    )
    def get(self, request, video_id: str):
        validation.video_id(video_id)
        caller_id = request.user.pk
        limit = selectors_likers.list_limit_parse(request.query_params.get("limit"))
        selectors_likers.likers_permission_check(caller_id=caller_id, video_id=video_id)
        page = selectors_likers.likers_page_list(caller_id=caller_id, video_id=video_id, limit=limit,
                                                 cursor=request.query_params.get("cursor"))
        next_cursor = (None if page.exhausted else
                       selectors_likers.likers_cursor_encode(caller_id=caller_id, video_id=video_id, page=page))
        return Response({"items": [i.as_dict() for i in page.items], "nextCursor": next_cursor,
                         "indexWatermark": selectors_likers.index_watermark()})


class RecentLikersView(APIView):
    """Up to 3 most recent visible likers, for feed cards (same permission rules as the list)."""

    @extend_schema(operation_id="video_likers_recent", responses={200: RecentLikersSerializer, **ERRORS})
    def get(self, request, video_id: str):
        validation.video_id(video_id)
        caller_id = request.user.pk
        selectors_likers.likers_permission_check(caller_id=caller_id, video_id=video_id)
        items = selectors_likers.recent_likers_list(caller_id=caller_id, video_id=video_id)
        return Response({"items": [i.as_dict() for i in items], "indexWatermark": selectors_likers.index_watermark()})
