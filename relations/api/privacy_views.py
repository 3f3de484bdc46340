"""DRF views of the caller's privacy settings and the per-video likers override (issue 5 §3). Validate,
call `relations.services.privacy` / `relations.selectors.privacy`, serialize."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from likes_project.audit.services import api_actor
from likes_project.jsonbody import parse_json_object
from relations import validation
from relations.api.serializers import ErrorSerializer
from relations.selectors import privacy as selectors_privacy
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
        return Response(selectors_privacy.user_privacy_get(user_id=request.user.pk).as_dict())

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
        result = privacy.user_privacy_set(user_id=request.user.pk, actor=api_actor(request.user.pk),
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
                                                    actor=api_actor(request.user.pk))
        return Response({"videoId": video_id, "likersPublic": value})
