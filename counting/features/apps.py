from django.apps import AppConfig


class FeaturesConfig(AppConfig):
    """The offline feature export (issue 31 §3): a built-in subscription that writes hourly gzip JSON Lines files of
    relation events, pseudonymised, with manifests, through the storage `feature_exports` (docs/exports.md)."""

    name = "counting.features"
    label = "features"
    verbose_name = "Offline feature export"

    def ready(self) -> None:
        from counting.features import observability, tasks  # noqa: F401 - the beat job's task
        from counting.features.retention import RULE
        from likes_project.retention import retention_rule_register

        observability.register()
        retention_rule_register(RULE)
