"""The public HTTP API as a drill calls it: Django's in-process test client with a real API token,
so every request runs the whole stack (middleware, authentication, rate limits, views, exception
handler) against the real stores, without a listening server."""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlencode

from django.conf import settings
from django.test import Client

from opsconsole.drills.population import DrillUser

PAGE = 100


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict | None  # the decoded JSON body; None when it was not JSON

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def code(self) -> str:
        return str((self.body or {}).get("code", ""))

    @property
    def is_envelope(self) -> bool:
        """An error answered with the JSON envelope `{"code", "message", ...}`."""
        return isinstance(self.body, dict) and isinstance(self.body.get("code"), str) and "message" in self.body


def _host() -> str:
    """A host name the deployment's ALLOWED_HOSTS accepts ("testserver" when any is)."""
    for host in settings.ALLOWED_HOSTS:
        if host == "*":
            return "testserver"
    host = next(iter(settings.ALLOWED_HOSTS), "testserver")
    return "drill" + host if host.startswith(".") else host


class DrillApi:
    """One client per thread (the test client keeps per-instance state)."""

    def __init__(self) -> None:
        self._client = Client(raise_request_exception=False, HTTP_HOST=_host())

    def _send(self, method: str, user: DrillUser, path: str, *, data=None, **headers) -> Answer:
        kwargs = {"HTTP_AUTHORIZATION": f"Token {user.token}", **headers}
        if data is not None:
            kwargs.update(data=json.dumps(data), content_type="application/json")
        response = getattr(self._client, method)(path, **kwargs)
        try:
            body = json.loads(response.content or b"null")
        except ValueError:
            body = None
        return Answer(response.status_code, body if isinstance(body, dict) else None)

    def like_put(self, user: DrillUser, video_id: str, desired: str, operation_id: str) -> Answer:
        return self._send("put", user, f"/v1/videos/{video_id}/like-relation", data={"desiredState": desired},
                          HTTP_IDEMPOTENCY_KEY=operation_id)

    def relation_get(self, user: DrillUser, video_id: str) -> Answer:
        return self._send("get", user, f"/v1/videos/{video_id}/like-relation")

    def operation_get(self, user: DrillUser, operation_id: str) -> Answer:
        return self._send("get", user, f"/v1/like-operations/{operation_id}")

    def like_count(self, user: DrillUser, video_id: str) -> Answer:
        return self._send("get", user, f"/v1/videos/{video_id}/like-count")

    def batch_query(self, user: DrillUser, video_ids: list[str], mins: dict[str, int] | None = None) -> Answer:
        body: dict = {"videoIds": video_ids}
        if mins:
            body["minRelationVersions"] = mins
        return self._send("post", user, "/v1/like-relations/batch-query", data=body)

    def _all_pages(self, user: DrillUser, path: str, key: str) -> tuple[Answer, list]:
        items, cursor = [], None
        for _ in range(1000):  # bounded: a drill population is a few pages at most
            query = {"limit": PAGE, **({"cursor": cursor} if cursor else {})}
            answer = self._send("get", user, f"{path}?{urlencode(query)}")
            if not answer.ok:
                return answer, items
            items += [item[key] for item in answer.body["items"]]
            cursor = answer.body.get("nextCursor")
            if not cursor:
                return answer, items
        raise RuntimeError(f"{path} did not end after 1000 pages")

    def likers(self, author: DrillUser, video_id: str) -> tuple[Answer, list[int]]:
        """Every liker of the video (the author may always list them), all pages."""
        return self._all_pages(author, f"/v1/videos/{video_id}/likers", "userId")

    def my_likes(self, user: DrillUser) -> tuple[Answer, list[str]]:
        """Every video of the user's liked list, all pages."""
        return self._all_pages(user, "/v1/me/likes", "videoId")

    def _page(self, user: DrillUser, path: str, limit: int, cursor: str | None) -> Answer:
        query = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return self._send("get", user, f"{path}?{urlencode(query)}")

    def likers_page(self, author: DrillUser, video_id: str, *, limit: int, cursor: str | None = None) -> Answer:
        """One page of the video's likers (items with userId and likedAt, nextCursor)."""
        return self._page(author, f"/v1/videos/{video_id}/likers", limit, cursor)

    def my_likes_page(self, user: DrillUser, *, limit: int, cursor: str | None = None) -> Answer:
        """One page of the user's liked list (items with videoId, nextCursor)."""
        return self._page(user, "/v1/me/likes", limit, cursor)

    def privacy_put(self, user: DrillUser, *, likes_private: bool) -> Answer:
        """Set the user's likesPrivate setting (hides them from other users' likers lists)."""
        return self._send("put", user, "/v1/me/privacy", data={"likesPrivate": likes_private})
