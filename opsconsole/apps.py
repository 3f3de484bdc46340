from django.apps import AppConfig


class OpsconsoleConfig(AppConfig):
    name = "opsconsole"
    default_auto_field = "django.db.models.BigAutoField"
