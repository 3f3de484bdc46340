"""Enable, disable or run now the periodic tasks beat runs, from the shell, as their admin does (D48):
`django_celery_beat.change_periodictask` and a reason, one audit record per task. Schedules themselves
live in code (CELERY_BEAT_SCHEDULE)."""

from django_celery_beat.models import PeriodicTask

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand
from opsconsole.services_beat import (
    BEAT_OPERATE_PERMISSION,
    PeriodicTaskNotFound,
    periodic_tasks_run_now,
    periodic_tasks_set_enabled,
)


class Command(DomainCommand):
    help = ("Enable, disable or run now periodic tasks by name (as listed in the admin's periodic tasks); a "
            "reason is required and each task gets an audit record.")

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["enable", "disable", "run-now"])
        parser.add_argument("names", nargs="+", metavar="name")
        parser.add_argument("--reason", required=True, help="Why (recorded in the audit log).")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        actor = cli_actor_resolve(username=options.get("actor"), permission=BEAT_OPERATE_PERMISSION)
        names = list(dict.fromkeys(options["names"]))
        found = dict(PeriodicTask.objects.filter(name__in=names).values_list("name", "pk"))
        missing = [n for n in names if n not in found]
        if missing:
            raise PeriodicTaskNotFound(f"No periodic task named {', '.join(map(repr, missing))}.")
        ids = [found[n] for n in names]
        if options["action"] == "run-now":
            sent = periodic_tasks_run_now(ids=ids, actor=actor, reason=options["reason"])
            self.stdout.write(f"sent now: {', '.join(sent)}")
            return
        change = periodic_tasks_set_enabled(ids=ids, enabled=options["action"] == "enable", actor=actor,
                                            reason=options["reason"])
        state = "enabled" if options["action"] == "enable" else "disabled"
        self.stdout.write(f"{state}: {', '.join(change.changed) or 'none'}; "
                          f"already {state}: {', '.join(change.unchanged) or 'none'}")
