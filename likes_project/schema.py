"""The public OpenAPI document (`/v1/schema`, `/v1/docs`), issue 10 §3.

It documents the public API only: the video service's `/internal/` endpoints are left out (a
preprocessing hook, so `manage.py spectacular` agrees with what is served), and the generated document is
kept per process once built: it changes only with a deploy, and building it walks every view and
serializer (tens of milliseconds of CPU that an anonymous caller could otherwise demand at will).
"""

from __future__ import annotations

import threading

from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.response import Response

INTERNAL_PREFIX = "/internal/"
CACHE_SECONDS = 300  # what a client or proxy may keep the document for

_lock = threading.Lock()
_documents: dict[tuple, dict] = {}


def public_endpoints(endpoints, **_kwargs):
    """drf-spectacular PREPROCESSING_HOOK: drop every `/internal/` endpoint."""
    return [endpoint for endpoint in endpoints if not endpoint[0].startswith(INTERNAL_PREFIX)]


def schema_cache_clear() -> None:
    with _lock:
        _documents.clear()


class PublicSchemaView(SpectacularAPIView):
    """The schema, generated once per process and API version, then served from memory."""

    def _get_schema_response(self, request):
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (version, self.serve_public)
        with _lock:
            document = _documents.get(key)
            if document is None:
                generator = self.generator_class(urlconf=self.urlconf, api_version=version, patterns=self.patterns)
                document = _documents[key] = generator.get_schema(request=None, public=self.serve_public)
        return Response(data=document, headers={
            "Content-Disposition": f'inline; filename="{self._get_filename(request, version)}"',
            "Cache-Control": f"public, max-age={CACHE_SECONDS}",
        })


class PublicDocsView(SpectacularSwaggerView):
    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        response["Cache-Control"] = f"public, max-age={CACHE_SECONDS}"
        return response
