# Every console role sees the creator notifications (read-only in the console; issue 31 §2).

from django.db import migrations

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles

VIEW = [("notifications", "notifywindow", "view_notifywindow", "Can view notify window")]
roles = console_roles(VIEW)


class Migration(migrations.Migration):

    dependencies = [
        ("notifications", "0001_initial"),
        *ROLE_DEPENDENCIES,
    ]

    operations = [migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"})]
