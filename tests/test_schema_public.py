"""The public API document (issue 10 §3): no `/internal/` path, built once per process, cacheable."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import call_command
from drf_spectacular.generators import SchemaGenerator

from likes_project import schema

pytestmark = pytest.mark.topology_independent


@pytest.fixture
def generations(monkeypatch):
    """How many times the document is generated (the real generator, counted)."""
    calls = []
    real = SchemaGenerator.get_schema

    def counted(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    schema.schema_cache_clear()
    yield calls
    schema.schema_cache_clear()


@pytest.mark.django_db(databases="__all__")
def test_the_served_document_has_no_internal_path_and_is_built_once(client, generations):
    first = client.get("/v1/schema")
    second = client.get("/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert first.status_code == second.status_code == 200
    paths = yaml.safe_load(first.content)["paths"]
    assert any(p.endswith("/like-relation") for p in paths)
    assert not [p for p in paths if p.startswith("/internal/")]
    assert set(second.json()["paths"]) == set(paths)
    assert len(generations) == 1  # the second request, in another format, was served from memory
    assert "max-age=" in first["Cache-Control"]


@pytest.mark.django_db(databases="__all__")
def test_the_docs_page_is_cacheable_and_points_at_the_public_document(client):
    resp = client.get("/v1/docs")
    assert resp.status_code == 200 and "max-age=" in resp["Cache-Control"]
    assert "/v1/schema" in resp.content.decode()


def test_the_generated_file_agrees_with_what_is_served():
    out = io.StringIO()
    call_command("spectacular", stdout=out)
    assert "/internal/" not in out.getvalue() and "/like-relation" in out.getvalue()
