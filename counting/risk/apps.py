from django.apps import AppConfig


class RiskConfig(AppConfig):
    """The risk ledger (issue 14 §4): hide / restore decisions over a video's relations, maker-checker,
    and the per-relation risk state they project, on `default`."""

    name = "counting.risk"
    label = "risk"
    verbose_name = "Risk control"

    def ready(self) -> None:
        from counting.risk import tasks
        from counting.risk.jobs import JOB_KINDS
        from counting.risk.scorer import RiskScorer
        from likes_project.eventlog.registry import consumer_register
        from likes_project.opsjobs.services import job_kind_register

        for kind in JOB_KINDS:
            job_kind_register(kind)
        # The asynchronous scorer (issue 32 §1): its pause switch is the consumer switch `risk`.
        consumer_register(RiskScorer.name, task=tasks.project_risk_task.name, projector=RiskScorer)
