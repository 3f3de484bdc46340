from django.apps import AppConfig


class CountingConfig(AppConfig):
    """The projections of the relation facts: counts, display snapshots, the count cache, and the
    who-liked reverse index with its API."""

    name = "counting"

    def ready(self) -> None:
        from counting import jobs, observability, tasks
        from counting.services.count_cache.rebuild import JOB_KIND as COUNT_CACHE_REBUILD
        from counting.services.projection import CountProjector
        from counting.services.reverse.erasure import projections_erase_user
        from counting.services.reverse.projector import ReverseIndexProjector
        from counting.services.reverse.rebuild import JOB_KIND as REVERSE_REBUILD
        from likes_project.erasure import account_eraser_register
        from likes_project.eventlog.registry import consumer_register
        from likes_project.health import readiness_detail_register
        from likes_project.opsjobs.services import job_kind_register

        consumer_register(CountProjector.name, task=tasks.project_partition_task.name, projector=CountProjector)
        consumer_register(ReverseIndexProjector.name, task=tasks.project_reverse_task.name,
                          projector=ReverseIndexProjector)
        for kind in (COUNT_CACHE_REBUILD, REVERSE_REBUILD, *jobs.JOB_KINDS):
            job_kind_register(kind)
        observability.register()
        readiness_detail_register("countPartitions", observability.count_partition_roles)
        # A deleted account's UNLIKED rows leave the count projection and the reverse index (issue 31 §4, PRIV-4).
        account_eraser_register("projections", projections_erase_user)
