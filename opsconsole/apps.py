from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class OpsconsoleConfig(AppConfig):
    """The operations console: the admin site, its pages and the operator commands (the top layer)."""

    name = "opsconsole"
    default = True

    def ready(self):
        from rest_framework.authtoken.models import Token

        from likes_project.api_tokens import token_label
        from likes_project.observability import register_part
        from opsconsole import dashboard
        from opsconsole.drills import scenarios
        from opsconsole.drills.backlog import EventlogPartitionDown, PublisherPaused
        from opsconsole.drills.cache_flush import CountCacheFlush, RelationCacheFlush
        from opsconsole.drills.generation_params import GenerationParamsChange
        from opsconsole.drills.hot_video_skew import HotVideoSkew
        from opsconsole.drills.ledger_kill import MigrationWorkerKill, SlotMoveWorkerKill
        from opsconsole.drills.ordering import OutOfOrderEvents
        from opsconsole.drills.paging import PagingUnderChurn
        from opsconsole.drills.recovery_artifacts import SnapshotArtifactTamper
        from opsconsole.drills.registry import drill_register
        from opsconsole.drills.route_epoch import OldEpochWrite
        from opsconsole.drills.shadow_repair import RepairUnderConsumption
        from opsconsole.drills.subscription_stall import SubscriptionStall

        register_part("console:switches", dashboard.switches_gauge)
        for drill in (*scenarios.SCENARIOS, MigrationWorkerKill, SlotMoveWorkerKill, *scenarios.LATE_SCENARIOS,
                      PublisherPaused, EventlogPartitionDown, SubscriptionStall, HotVideoSkew,
                      OutOfOrderEvents, PagingUnderChurn, RelationCacheFlush, CountCacheFlush, SnapshotArtifactTamper,
                      GenerationParamsChange, OldEpochWrite, RepairUnderConsumption):
            drill_register(drill)

        # DRF's Token.__str__ is the key itself: every admin title, LogEntry repr, list of objects a
        # delete would remove, and log line that prints a token would print the secret (D48).
        Token.__str__ = token_label


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin, with the console's site as the default `admin.site`."""

    default = False
    default_site = "opsconsole.sites.OpsConsoleSite"
