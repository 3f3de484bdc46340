"""DRF views of the caller's privacy settings, the per-video likers override and another user's liked
list (issue 5 §3). Validate, call `relations.services.privacy`, serialize."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from likes_project.jsonbody import parse_json_object
from relations import selectors_list, validation
from relations.api.list_views import MyLikesPageSerializer
from relations.api.serializers import ErrorSerializer
from relations.services import privacy

PRIVACY_FIELDS = {"likesPrivate": "likes_private", "likersPublic": "likers_public"}


class PrivacySerializer(serializers.Serializer):
    likesPrivate = serializers.BooleanField(help_text="Hide me from other users' likers lists and my liked list.")
    likersPublic = serializers.BooleanField(help_text="Anyone who can see my videos may see who liked them.")


class PrivacyPutSerializer(serializers.Serializer):
    likesPrivate = serializers.BooleanField(required=False)
    likersPublic = serializers.BooleanField(required=False)


class LikersVisibilityPutSerializer(serializers.Serializer):
    likersPublic = serializers.BooleanField()


class LikersVisibilitySerializer(serializers.Serializer):
    videoId = serializers.CharField()
    likersPublic = serializers.BooleanField()


class MyPrivacyView(APIView):
    """The caller's privacy settings (both default to false)."""

    @extend_schema(operation_id="my_privacy_get", responses={200: PrivacySerializer, 401: ErrorSerializer})
    def get(self, request):
        return Response(privacy.user_privacy_get(user_id=request.user.pk).as_dict())

    @extend_schema(
        operation_id="my_privacy_put",
        description="Set one or both settings; an absent key keeps its value, unknown keys are ignored. "
                    "A body with neither key, or a value that is not a JSON boolean, is 400 `invalid_privacy`.",
        request=PrivacyPutSerializer,
        responses={200: PrivacySerializer, 400: ErrorSerializer, 401: ErrorSerializer},
    )
    def put(self, request):
        body = parse_json_object(request.body)
        changes = {arg: body[key] for key, arg in PRIVACY_FIELDS.items() if key in body}
        result = privacy.user_privacy_set(user_id=request.user.pk, actor=privacy.api_actor(request.user.pk),
                                          **changes)
        return Response(result.as_dict())


class VideoLikersVisibilityView(APIView):
    """The author's per-video override of their likersPublic setting."""

    @extend_schema(
        operation_id="video_likers_visibility_put",
        request=LikersVisibilityPutSerializer,
        responses={200: LikersVisibilitySerializer, 400: ErrorSerializer, 401: ErrorSerializer,
                   403: ErrorSerializer, 404: ErrorSerializer},
    )
    def put(self, request, video_id: str):
        validation.video_id(video_id)
        body = parse_json_object(request.body)
        value = privacy.video_likers_visibility_set(user_id=request.user.pk, video_id=video_id,
                                                    likers_public=body.get("likersPublic"),
                                                    actor=privacy.api_actor(request.user.pk))
        return Response({"videoId": video_id, "likersPublic": value})


class UserLikesView(APIView):
    """Another user's liked videos, newest first: the same list and cursor rules as /v1/me/likes."""

    @extend_schema(
        operation_id="user_likes_list",
        parameters=[
            OpenApiParameter("limit", int, OpenApiParameter.QUERY, required=False,
                             description="Page size, 1-100 (default 20)."),
            OpenApiParameter("cursor", str, OpenApiParameter.QUERY, required=False,
                             description="The nextCursor of the previous page; omit for the first page."),
        ],
        responses={200: MyLikesPageSerializer, 400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer,
                   404: ErrorSerializer},
    )
    def get(self, request, username: str):
        limit = selectors_list.list_limit_parse(request.query_params.get("limit"))
        owner_id, page = privacy.user_liked_page_list(caller_id=request.user.pk, username=username, limit=limit,
                                                      cursor=request.query_params.get("cursor"))
        next_cursor = (None if page.next_key is None
                       else selectors_list.list_cursor_encode(user_id=owner_id, key=page.next_key))
        return Response({"items": [item.as_dict() for item in page.items], "nextCursor": next_cursor})
