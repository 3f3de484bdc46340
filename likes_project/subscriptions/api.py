"""The pull contract of subscriptions (issue 31 §1; docs/events.md): read a page of events, acknowledge a cursor.
`Authorization: Bearer <the subscription's token>`; thin views over the selectors and services."""

from __future__ import annotations

from django.conf import settings
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from likes_project.errors import InvalidInput
from likes_project.jsonbody import parse_json_object
from likes_project.subscriptions import selectors, services


def _bearer(request) -> str | None:
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    return credential.strip() or None if scheme.lower() == "bearer" else None


def _limit(raw) -> int:
    try:
        limit = int(raw)
    except (TypeError, ValueError):
        limit = 0
    if not 1 <= limit <= settings.SUBSCRIPTION_PULL_MAX:
        raise InvalidInput(f"limit is 1-{settings.SUBSCRIPTION_PULL_MAX}.", code="invalid_limit")
    return limit


class SubscriptionView(APIView):
    authentication_classes: list = []  # the subscription's own token, checked by the service
    permission_classes = [AllowAny]

    def subscription(self, request, name: str):
        sub = services.subscription_authorize(name=name, token=_bearer(request))
        services.subscription_readable(sub)
        return sub


class EventsView(SubscriptionView):
    def get(self, request, name: str):
        sub = self.subscription(request, name)
        page = selectors.subscription_read(sub, cursor=request.query_params.get("after") or None,
                                           limit=_limit(request.query_params.get("limit", "100")))
        return Response({"events": page.events, "nextCursor": page.next_cursor, "lagSeconds": page.lag_seconds})


class AckView(SubscriptionView):
    def post(self, request, name: str):
        sub = self.subscription(request, name)
        cursor = parse_json_object(request._request.body).get("cursor")
        if not isinstance(cursor, str):
            raise InvalidInput("Give the cursor to acknowledge: {\"cursor\": \"...\"}.", code="invalid_cursor")
        at = selectors.cursor_decode(sub, cursor)
        sub = services.subscription_ack(sub=sub, positions=at.partitions, notices=at.notices)
        return Response({"name": sub.name, "status": sub.status, "lastAckAt": sub.last_ack_at})
