"""DRF views of liked lists: the caller's (`GET /v1/me/likes`, spec §4.13) and another user's
(`GET /v1/users/<username>/likes`). Validate the query, call the list selector, serialize; the rules
live in `relations.selectors.my_likes` and `relations.selectors.privacy`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from relations.api.serializers import PAGE_PARAMETERS, ErrorSerializer, liked_at_field, next_cursor_field
from relations.selectors import my_likes as selectors_my_likes
from relations.selectors import privacy as selectors_privacy


class MyLikesItemSerializer(serializers.Serializer):
    videoId = serializers.CharField()
    likedAt = liked_at_field()
    relationVersion = serializers.IntegerField(min_value=1)


class MyLikesPageSerializer(serializers.Serializer):
    items = MyLikesItemSerializer(many=True)
    nextCursor = next_cursor_field(end="at the end of the list", short_because="filtered videos")


class MyLikesView(APIView):
    """The caller's liked videos, newest first, by keyset cursor (LIST-1 … LIST-7)."""

    @extend_schema(
        operation_id="my_likes_list",
        parameters=PAGE_PARAMETERS,
        responses={200: MyLikesPageSerializer, 400: ErrorSerializer, 401: ErrorSerializer},
    )
    def get(self, request):
        user_id = request.user.pk
        limit = selectors_my_likes.list_limit_parse(request.query_params.get("limit"))
        raw = request.query_params.get("cursor")
        after = None if raw is None else selectors_my_likes.list_cursor_decode(user_id=user_id, cursor=raw)
        return _page_response(user_id, selectors_my_likes.liked_page_list(user_id=user_id, limit=limit, after=after))


class UserLikesView(APIView):
    """Another user's liked videos, newest first: the same list and cursor rules as /v1/me/likes."""

    @extend_schema(
        operation_id="user_likes_list",
        parameters=PAGE_PARAMETERS,
        responses={200: MyLikesPageSerializer, 400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer,
                   404: ErrorSerializer},
    )
    def get(self, request, username: str):
        limit = selectors_my_likes.list_limit_parse(request.query_params.get("limit"))
        owner_id, page = selectors_privacy.user_liked_page_list(caller_id=request.user.pk, username=username,
                                                                limit=limit, cursor=request.query_params.get("cursor"))
        return _page_response(owner_id, page)


def _page_response(owner_id: int, page: selectors_my_likes.LikedPage) -> Response:
    next_cursor = None if page.next_key is None else selectors_my_likes.list_cursor_encode(user_id=owner_id,
                                                                                          key=page.next_key)
    return Response({"items": [item.as_dict() for item in page.items], "nextCursor": next_cursor})
