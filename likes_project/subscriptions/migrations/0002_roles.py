# The console's roles see subscriptions; operators create, pause, resume and retire them (issue 31 §1).

from django.db import migrations

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles

VIEW = [("subscriptions", "subscription", "view_subscription", "Can view subscription")]
OPERATE = [("subscriptions", "subscription", "manage_subscription",
            "Can create, pause, resume and retire subscriptions")]
roles = console_roles(VIEW, operate=OPERATE)


class Migration(migrations.Migration):

    dependencies = [
        ("subscriptions", "0001_initial"),
        *ROLE_DEPENDENCIES,
    ]

    operations = [migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"})]
