from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class OpsconsoleConfig(AppConfig):
    """The operations console: the admin site, its pages and the operator commands (the top layer)."""

    name = "opsconsole"
    default = True
    default_auto_field = "django.db.models.BigAutoField"


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin, with the console's site as the default `admin.site`."""

    default = False
    default_site = "opsconsole.sites.OpsConsoleSite"
