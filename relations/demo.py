"""The demo feed (/demo/feed, issue 30 §2): a page of hearts and counts driven by the browser client
(clients/browser/likes-client.js, served as /static/likes-client.js) over the public API. The page itself holds
no data of anyone's: only the ids of the videos it shows; the token a visitor enters stays in the browser's
sessionStorage and goes to the API only. Off unless DEMO_FEED_ENABLED (the development settings turn it on)."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET

from likes_project.errors import InvalidInput
from relations import selectors, validation

FEED_SIZE = 20


@require_GET
def demo_feed(request):
    """`?videos=id1,id2,…` (at most FEED_SIZE), else the FEED_SIZE most recently pushed public, active videos."""
    if not settings.DEMO_FEED_ENABLED:
        raise Http404("The demo feed is off (DEMO_FEED_ENABLED).")
    named = [v.strip() for v in request.GET.get("videos", "").split(",") if v.strip()]
    try:
        videos = [validation.video_id(v) for v in dict.fromkeys(named)]
    except InvalidInput as exc:
        return HttpResponseBadRequest(f"{exc.message} ({exc.code})", content_type="text/plain")
    if len(videos) > FEED_SIZE:
        return HttpResponseBadRequest(f"At most {FEED_SIZE} videos (batch_too_large).", content_type="text/plain")
    return render(request, "relations/demo_feed.html",
                  {"videos": videos or selectors.recent_public_videos(limit=FEED_SIZE)})
