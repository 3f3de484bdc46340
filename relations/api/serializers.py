"""Serializers that document the API contract in the OpenAPI schema. Bodies are parsed strictly by
the views (`likes_project.jsonbody`) so that every bad input maps to one stable error code."""

from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

STATES = ["LIKED", "UNLIKED"]


class RelationSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=STATES)
    relationVersion = serializers.IntegerField(min_value=0)


class LikeRelationPutSerializer(serializers.Serializer):
    desiredState = serializers.ChoiceField(choices=STATES)
    baseVersion = serializers.IntegerField(min_value=0, required=False)
    deviceId = serializers.CharField(max_length=128, required=False)
    clientSequence = serializers.IntegerField(required=False)


class CommandResponseSerializer(serializers.Serializer):
    operationId = serializers.CharField()
    videoId = serializers.CharField()
    state = serializers.ChoiceField(choices=STATES, help_text="This operation's verdict.")
    relationVersion = serializers.IntegerField(help_text="This operation's verdict version.")
    operationResult = RelationSerializer()
    currentRelation = RelationSerializer()
    changed = serializers.BooleanField()
    replayed = serializers.BooleanField()
    countConsistency = serializers.CharField(default="EVENTUAL")


class LikeRelationGetResponseSerializer(serializers.Serializer):
    videoId = serializers.CharField()
    state = serializers.ChoiceField(choices=STATES)
    relationVersion = serializers.IntegerField()


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class VideoPushSerializer(serializers.Serializer):
    authorId = serializers.IntegerField(min_value=1, required=False)
    authorUsername = serializers.CharField(required=False)
    visibility = serializers.ChoiceField(choices=["public", "friends", "private"], required=False)
    status = serializers.ChoiceField(choices=["active", "taken_down", "deleted"], required=False)
    version = serializers.IntegerField(min_value=1)
    publishedAt = serializers.DateTimeField(required=False, help_text="When the video was published (ISO 8601 "
                                            "with its offset); kept when a later push leaves it out.")


class VideoSnapshotSerializer(serializers.Serializer):
    videoId = serializers.CharField()
    authorId = serializers.IntegerField()
    visibility = serializers.CharField()
    status = serializers.CharField()
    version = serializers.IntegerField()
    applied = serializers.BooleanField(required=False)


# The query parameters of every cursor-paged list (my likes, a user's likes, a video's likers).
PAGE_PARAMETERS = [
    OpenApiParameter("limit", int, OpenApiParameter.QUERY, required=False,
                     description="Page size, 1-100 (default 20)."),
    OpenApiParameter("cursor", str, OpenApiParameter.QUERY, required=False,
                     description="The nextCursor of the previous page; omit for the first page."),
]


def liked_at_field() -> serializers.DateTimeField:
    return serializers.DateTimeField(help_text="When the like happened (the relation's state change), UTC.")


def next_cursor_field(*, end: str, short_because: str) -> serializers.CharField:
    """The nextCursor of every cursor-paged list: `end` says when it is null, `short_because` why a
    page may be short while it is not."""
    return serializers.CharField(
        allow_null=True,
        help_text=f"Opaque; pass back as `cursor` for the next page. Null only {end}. "
                  f"A page may be short or empty while nextCursor is not null ({short_because}).",
    )
