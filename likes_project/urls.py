from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from likes_project import health
from relations.api.urls import internal_urlpatterns

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics_view, name="metrics"),
    path("v1/schema", SpectacularAPIView.as_view(), name="schema"),
    path("v1/docs", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("v1/", include("relations.api.urls")),
    path("v1/", include("counting.api.urls")),
    path("internal/v1/", include(internal_urlpatterns)),
    path("admin/", admin.site.urls),
]
