"""OpenAPI extensions (imported by RelationsConfig.ready so drf-spectacular sees them)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ServiceTokenScheme(OpenApiAuthenticationExtension):
    target_class = "relations.api.auth.ServiceTokenAuthentication"
    name = "videoServiceToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "VIDEO_SERVICE_TOKEN of the video service"}
