"""`POST /v1/like-relations/batch-query`: a feed page's "do I like each, and how many likes" (QRY)."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from counting import selectors as count_selectors
from likes_project.errors import InvalidInput
from likes_project.jsonbody import parse_json_object
from relations import validation
from relations.api.serializers import ErrorSerializer


class BatchQuerySerializer(serializers.Serializer):
    videoIds = serializers.ListField(child=serializers.CharField(max_length=64), max_length=100)
    minRelationVersions = serializers.DictField(child=serializers.IntegerField(min_value=0), required=False)


class BatchItemSerializer(serializers.Serializer):
    videoId = serializers.CharField()
    available = serializers.BooleanField()
    myState = serializers.ChoiceField(choices=["LIKED", "UNLIKED"])
    relationVersion = serializers.IntegerField()
    displayCount = serializers.IntegerField(allow_null=True)
    countSnapshotAt = serializers.DateTimeField(allow_null=True)


class BatchQueryResponseSerializer(serializers.Serializer):
    items = BatchItemSerializer(many=True)


def _parse(body: dict) -> tuple[list[str], dict[str, int]]:
    ids = body.get("videoIds")
    if not isinstance(ids, list):
        raise InvalidInput("videoIds must be a list of video ids.", code="invalid_video_ids")
    if len(ids) > settings.BATCH_QUERY_MAX_IDS:
        raise InvalidInput(f"At most {settings.BATCH_QUERY_MAX_IDS} video ids per request.", code="batch_too_large",
                           maxIds=settings.BATCH_QUERY_MAX_IDS)
    for video_id in ids:
        validation.video_id(video_id)
    mins = body.get("minRelationVersions")
    if mins is None:
        mins = {}
    if not isinstance(mins, dict):
        raise InvalidInput("minRelationVersions must be an object of videoId -> version.",
                           code="invalid_min_relation_versions")
    for video_id, version in mins.items():
        validation.video_id(video_id)
        validation.strict_int(version, field="minRelationVersions", code="invalid_min_relation_versions", minimum=0)
    return list(dict.fromkeys(ids)), mins


class BatchQueryView(APIView):
    """One call per feed page: one Redis round trip, one relation query on the caller's shard for what it missed."""

    @extend_schema(operation_id="like_relations_batch_query", request=BatchQuerySerializer,
                   responses={200: BatchQueryResponseSerializer, 400: ErrorSerializer, 401: ErrorSerializer})
    def post(self, request):
        video_ids, mins = _parse(parse_json_object(request._request.body))
        user_id = request.user.pk
        if not video_ids:
            return Response({"items": []})
        visible, relations, counts = count_selectors.feed_page_read(user_id=user_id, video_ids=video_ids,
                                                                    min_versions=mins)
        items = []
        for video_id in video_ids:
            rel = relations[video_id]
            count = counts.get(video_id) if visible[video_id] else None
            items.append({
                "videoId": video_id,
                "available": visible[video_id],
                "myState": rel.state,
                "relationVersion": rel.relation_version,
                "displayCount": count.display_count if count else None,
                "countSnapshotAt": count.snapshot_at if count else None,
            })
        return Response({"items": items})
