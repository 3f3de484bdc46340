from django.contrib import admin
from django.urls import include, path

from likes_project import health
from likes_project.schema import PublicDocsView, PublicSchemaView
from relations.api.urls import internal_urlpatterns
from relations.demo import demo_feed

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics_view, name="metrics"),
    path("v1/schema", PublicSchemaView.as_view(), name="schema"),
    path("v1/docs", PublicDocsView.as_view(url_name="schema"), name="docs"),
    path("v1/", include("relations.api.urls")),
    path("v1/", include("counting.api.urls")),
    path("v1/", include("counting.notifications.urls")),
    path("internal/v1/", include("likes_project.subscriptions.urls")),
    path("internal/v1/", include(internal_urlpatterns)),
    path("admin/", admin.site.urls),
    path("demo/feed", demo_feed, name="demo_feed"),
]
