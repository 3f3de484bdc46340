# The console's trace (issue 14 §1) links each consumer's checkpoint to its admin page: every console
# role may read the checkpoints (they were readable by superusers only).

from django.db import migrations

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles

VIEW_CHECKPOINTS = [("eventlog", "consumercheckpoint", "view_consumercheckpoint", "Can view consumer checkpoint")]


roles = console_roles(VIEW_CHECKPOINTS)


class Migration(migrations.Migration):

    dependencies = [
        ("eventlog", "0003_gauge_snapshot"),
        *ROLE_DEPENDENCIES,
    ]

    operations = [migrations.RunPython(roles, migrations.RunPython.noop)]
