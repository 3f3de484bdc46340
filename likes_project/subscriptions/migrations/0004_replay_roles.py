# Operators request a subscription's replay from the archive (their manage permission); approvers approve it.

from django.db import migrations

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles

VIEW = [("subscriptions", "subscriptionreplay", "view_subscriptionreplay", "Can view subscription replay")]
APPROVE = [("subscriptions", "subscriptionreplay", "approve_subscriptionreplay",
            "Can approve a subscription's replay from the archive")]
roles = console_roles(VIEW, approve=APPROVE)


class Migration(migrations.Migration):

    dependencies = [
        ("subscriptions", "0003_replay"),
        *ROLE_DEPENDENCIES,
    ]

    operations = [migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"})]
