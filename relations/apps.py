from django.apps import AppConfig


class RelationsConfig(AppConfig):
    """The relation facts: commands, outbox and publisher, the visibility inputs, the relation cache,
    the liked lists, exports and accounts."""

    name = "relations"

    def ready(self) -> None:
        from django.core import checks as django_checks

        from likes_project.eventlog.registry import archive_source_register, consumer_register
        from likes_project.opsjobs.services import job_kind_register
        from relations import checks, jobs, observability, tasks
        from relations.api import schema  # noqa: F401 - registers OpenAPI extensions
        from relations.services import retention_rules
        from relations.services.outbox_replay import archived_entries
        from relations.services.relation_cache import RelationCacheProjector

        consumer_register(RelationCacheProjector.name, task=tasks.project_relcache_task.name,
                          projector=RelationCacheProjector)
        for kind in jobs.JOB_KINDS:
            job_kind_register(kind)
        observability.register()
        retention_rules.register()  # issue 31 §4: noop-commands, commands, outbox-archive
        django_checks.register(checks.tombstone_retention_check)
        archive_source_register(archived_entries)  # what a subscription's replay reads back (issue 31 §1)
