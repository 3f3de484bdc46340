"""DRF views of the author's notifications: `GET /v1/me/notifications` and `POST /v1/me/notifications/read`
(issue 31 §2). Validate, call the selector or the service, serialize; token auth as every /v1 endpoint."""

from __future__ import annotations

import datetime as dt

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from counting.notifications import selectors, services
from likes_project.errors import InvalidInput
from likes_project.jsonbody import parse_json_object
from relations.api.serializers import PAGE_PARAMETERS, ErrorSerializer


class NotificationSerializer(serializers.Serializer):
    videoId = serializers.CharField()
    newLikes = serializers.IntegerField(help_text="Likes in the window; grows until windowEnd while it is open.")
    sampleLikers = serializers.ListField(child=serializers.CharField(), help_text=(
        "Up to 3 usernames of likers in the window you may see named (private, banned and deleted accounts "
        "count in newLikes but are never named)."))
    windowStart = serializers.DateTimeField()
    windowEnd = serializers.DateTimeField()
    read = serializers.BooleanField()


class NotificationsPageSerializer(serializers.Serializer):
    items = NotificationSerializer(many=True)
    nextCursor = serializers.CharField(allow_null=True, help_text=(
        "Opaque; pass back as `cursor` for the next page. Null when this page holds the oldest notification."))


class MarkReadSerializer(serializers.Serializer):
    upTo = serializers.DateTimeField(help_text="Mark read every notification whose windowEnd is at or before this "
                                               "time (ISO 8601 with a time zone, e.g. a listed windowEnd).")


class MarkedSerializer(serializers.Serializer):
    marked = serializers.IntegerField(help_text="How many notifications were unread and are now read.")


def up_to_parse(raw) -> dt.datetime:
    """`upTo`: an ISO 8601 time with a time zone; anything else is 400 `invalid_up_to`."""
    invalid = InvalidInput("upTo must be an ISO 8601 time with a time zone, e.g. a windowEnd.", code="invalid_up_to")
    if not isinstance(raw, str) or len(raw) > 64:
        raise invalid
    try:
        value = parse_datetime(raw)
    except ValueError:  # well formed but not a date (month 13)
        raise invalid from None
    if value is None or value.tzinfo is None:
        raise invalid
    return value


class MyNotificationsView(APIView):
    """The caller's notifications of likes on their videos, newest window first."""

    @extend_schema(operation_id="my_notifications_list", parameters=PAGE_PARAMETERS,
                   responses={200: NotificationsPageSerializer, 400: ErrorSerializer, 401: ErrorSerializer})
    def get(self, request):
        author_id = request.user.pk
        limit = selectors.list_limit_parse(request.query_params.get("limit"))
        page = selectors.notifications_page_list(author_id=author_id, limit=limit,
                                                 cursor=request.query_params.get("cursor"))
        next_cursor = (None if page.next_key is None else
                       selectors.notifications_cursor_encode(author_id=author_id, key=page.next_key))
        return Response({"items": [n.as_dict() for n in page.items], "nextCursor": next_cursor})


class MyNotificationsReadView(APIView):
    """Mark the caller's notifications read up to a window end."""

    @extend_schema(operation_id="my_notifications_mark_read", request=MarkReadSerializer,
                   description="A body that is not a JSON object is 400 `invalid_json` (or `invalid_body`); a "
                               "missing or malformed `upTo` is 400 `invalid_up_to`.",
                   responses={200: MarkedSerializer, 400: ErrorSerializer, 401: ErrorSerializer})
    def post(self, request):
        body = parse_json_object(request.body)
        up_to = up_to_parse(body.get("upTo"))
        return Response({"marked": services.notifications_mark_read(author_id=request.user.pk, up_to=up_to)})
