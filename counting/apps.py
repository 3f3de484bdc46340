from django.apps import AppConfig


class CountingConfig(AppConfig):
    name = "counting"
    default_auto_field = "django.db.models.BigAutoField"
