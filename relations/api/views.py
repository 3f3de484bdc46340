"""DRF views: validate, call one service or selector, serialize. No business rules here."""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from likes_project.errors import InvalidInput, RateLimited
from likes_project.jsonbody import parse_json_object
from relations import selectors, validation
from relations.api import serializers as s
from relations.api.auth import IsVideoService, ServiceTokenAuthentication, UserTokenAuthentication
from relations.errors import VideoNotFound
from relations.services import commands, limits, videos
from relations.services.videos import VideoUpsertResult

USER_FIELDS = ("userId", "user_id", "userID", "uid", "user")
ERRORS = {400: s.ErrorSerializer, 401: s.ErrorSerializer, 403: s.ErrorSerializer, 404: s.ErrorSerializer,
          409: s.ErrorSerializer, 413: s.ErrorSerializer, 429: s.ErrorSerializer}


def trusted_proxy_count() -> int:
    """`TRUSTED_PROXY_COUNT`; unset, the older `TRUST_X_FORWARDED_FOR=true` means one proxy."""
    count = getattr(settings, "TRUSTED_PROXY_COUNT", None)
    if count is None:
        return 1 if settings.TRUST_X_FORWARDED_FOR else 0
    return max(0, int(count))


def client_ip(request) -> str | None:
    """The client address the per-IP limit keys on. Each trusted proxy appends the address it received
    the request from, so with N of them the N-th entry from the right is the one the outermost trusted
    proxy saw; anything left of it was sent by the client and is never trusted. A header with fewer
    entries, or an entry that is not an IP address, falls back to REMOTE_ADDR (the nearest peer)."""
    remote = request.META.get("REMOTE_ADDR")
    count = trusted_proxy_count()
    if count == 0:
        return remote
    entries = [e.strip() for e in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    entries = [e for e in entries if e]
    if len(entries) < count:
        return remote
    candidate = entries[-count]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote


class LikeRelationView(APIView):
    """The caller's relation with one video: read it, or set it to an absolute state."""

    @extend_schema(
        operation_id="like_relation_get",
        responses={200: s.LikeRelationGetResponseSerializer, **ERRORS},
    )
    def get(self, request, video_id: str):
        validation.video_id(video_id)
        rel = selectors.relation_get(user_id=request.user.pk, video_id=video_id)
        return Response({"videoId": video_id, **rel.as_dict()})

    @extend_schema(
        operation_id="like_relation_put",
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=True,
                                     description="1-128 characters of [A-Za-z0-9._:-], one per user intent"),
                    OpenApiParameter("X-Device-Id", str, OpenApiParameter.HEADER, required=False,
                                     description="The device, when the body has no deviceId: its own rate limit "
                                                 "and the user's devices-per-hour window")],
        request=s.LikeRelationPutSerializer,
        responses={200: s.CommandResponseSerializer, **ERRORS},
    )
    def put(self, request, video_id: str):
        validation.video_id(video_id)
        operation_id = validation.operation_id(request.headers.get("Idempotency-Key"))
        body = parse_json_object(request._request.body)
        named = [f for f in USER_FIELDS if f in body]
        if named:
            raise InvalidInput("The acting user comes from the token; the body must not name a user.",
                               code="user_id_not_allowed", fields=named)
        desired_state = validation.desired_state(body.get("desiredState"))
        base_version = body.get("baseVersion")
        if base_version is not None:
            validation.strict_int(base_version, field="baseVersion", code="invalid_base_version", minimum=0)
        device_id = body.get("deviceId", request.headers.get("X-Device-Id"))  # the body's, else the header's
        device_id = "" if device_id is None else validation.device_id(device_id)
        client_sequence = body.get("clientSequence")
        if client_sequence is not None:
            validation.strict_int(client_sequence, field="clientSequence", code="invalid_client_sequence")

        user_id = request.user.pk
        verdict = limits.request_limits_check(user_id=user_id, client_ip=client_ip(request), device_id=device_id)
        if not verdict.allowed:
            commands.count_command("rate_limited", desired_state)
            current = selectors.relation_get(user_id=user_id, video_id=video_id)
            raise RateLimited(
                headers={"Retry-After": str(verdict.retry_after_s)}, scope=verdict.scope,
                retryAfterSeconds=verdict.retry_after_s, currentRelation=current.as_dict(),
            )
        result = commands.relation_set_state(
            user_id=user_id, video_id=video_id, desired_state=desired_state, operation_id=operation_id,
            base_version=base_version, device_id=device_id, client_sequence=client_sequence,
            risk_level=getattr(request.user, "likes_risk_level", None),
        )
        return Response(result.as_response())


class LikeOperationView(APIView):
    """The stored verdict of one of the caller's operations (resolves a lost response)."""

    @extend_schema(operation_id="like_operation_get", responses={200: s.CommandResponseSerializer, **ERRORS})
    def get(self, request, operation_id: str):
        try:
            validation.operation_id(operation_id, field="operationId")
        except InvalidInput as exc:
            raise InvalidInput(exc.message, code="invalid_operation_id") from exc
        return Response(commands.operation_get(user_id=request.user.pk, operation_id=operation_id).as_response())


def _video_response(video: selectors.VideoRecord, applied: bool | None = None) -> dict:
    # The video service's own snapshot, as it pushed it: an operator override is not the service's
    # fact and is not shown here (D50; it is on the admin's video page).
    data = {"videoId": video.video_id, "authorId": video.author_id, "visibility": video.service_visibility,
            "status": video.service_status, "version": video.version}
    if applied is not None:
        data["applied"] = applied
    return data


class InternalVideoView(APIView):
    """The video service pushes visibility snapshots here (CMD-12). Service token only."""

    authentication_classes = [ServiceTokenAuthentication, UserTokenAuthentication]
    permission_classes = [IsVideoService]

    @extend_schema(operation_id="internal_video_get", responses={200: s.VideoSnapshotSerializer, **ERRORS})
    def get(self, request, video_id: str):
        validation.video_id(video_id)
        video = selectors.video_record_get(video_id=video_id)
        if video is None:
            raise VideoNotFound()
        return Response(_video_response(video))

    @extend_schema(operation_id="internal_video_put", request=s.VideoPushSerializer,
                   responses={200: s.VideoSnapshotSerializer, **ERRORS})
    def put(self, request, video_id: str):
        validation.video_id(video_id)
        body = parse_json_object(request._request.body)
        author_id = body.get("authorId")
        if author_id is None and body.get("authorUsername") is not None:
            username = body["authorUsername"]
            user = (get_user_model().objects.filter(username=username).first()
                    if validation.storable_text(username) else None)
            if user is None:
                raise InvalidInput("authorUsername names no user.", code="unknown_author")
            author_id = user.pk
        if author_id is None:
            raise InvalidInput("authorId (or authorUsername) is required.", code="invalid_author")
        # Bounded here: an id past 64 bits would otherwise fail in the database as a 5xx.
        validation.strict_int(author_id, field="authorId", code="invalid_author", minimum=1)
        version = body.get("version")
        validation.strict_int(version, field="version", code="invalid_version", minimum=1)
        result: VideoUpsertResult = videos.video_snapshot_upsert(
            video_id=video_id, author_id=author_id,
            visibility=body.get("visibility", "public"), status=body.get("status", "active"),
            version=version, actor=videos.VIDEO_SERVICE_ACTOR, published_at=validation.published_at(
                body.get("publishedAt")),
        )
        return Response(_video_response(result.record, applied=result.applied))
