"""DRF view of the caller's liked list (`GET /v1/me/likes`, spec §4.13). Validates the query, calls
the list selector, serializes; the rules live in `relations.selectors_list`."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from relations import selectors_list
from relations.api.serializers import ErrorSerializer


class MyLikesItemSerializer(serializers.Serializer):
    videoId = serializers.CharField()
    likedAt = serializers.DateTimeField(help_text="When the like happened (the relation's state change), UTC.")
    relationVersion = serializers.IntegerField(min_value=1)


class MyLikesPageSerializer(serializers.Serializer):
    items = MyLikesItemSerializer(many=True)
    nextCursor = serializers.CharField(
        allow_null=True,
        help_text="Opaque; pass back as `cursor` for the next page. Null only at the end of the list. "
                  "A page may be short or empty while nextCursor is not null (filtered videos).",
    )


class MyLikesView(APIView):
    """The caller's liked videos, newest first, by keyset cursor (LIST-1 … LIST-7)."""

    @extend_schema(
        operation_id="my_likes_list",
        parameters=[
            OpenApiParameter("limit", int, OpenApiParameter.QUERY, required=False,
                             description="Page size, 1-100 (default 20)."),
            OpenApiParameter("cursor", str, OpenApiParameter.QUERY, required=False,
                             description="The nextCursor of the previous page; omit for the first page."),
        ],
        responses={200: MyLikesPageSerializer, 400: ErrorSerializer, 401: ErrorSerializer},
    )
    def get(self, request):
        user_id = request.user.pk
        limit = selectors_list.list_limit_parse(request.query_params.get("limit"))
        raw_cursor = request.query_params.get("cursor")
        after = None if raw_cursor is None else selectors_list.list_cursor_decode(user_id=user_id, cursor=raw_cursor)
        page = selectors_list.liked_page_list(user_id=user_id, limit=limit, after=after)
        next_cursor = (None if page.next_key is None
                       else selectors_list.list_cursor_encode(user_id=user_id, key=page.next_key))
        return Response({"items": [item.as_dict() for item in page.items], "nextCursor": next_cursor})
