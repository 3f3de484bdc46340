from django.apps import AppConfig


class RelationsConfig(AppConfig):
    name = "relations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from relations.api import schema  # noqa: F401 - registers OpenAPI extensions
