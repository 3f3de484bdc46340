# The console's trace (issue 14 §1) links each consumer's checkpoint to its admin page: every console
# role may read the checkpoints (they were readable by superusers only).

from django.db import migrations

from likes_project.migration_kit import group_permissions_grant

VIEW_CHECKPOINTS = [("eventlog", "consumercheckpoint", "view_consumercheckpoint", "Can view consumer checkpoint")]


def roles(apps, schema_editor):
    for role in ("likes-viewer", "likes-operator", "likes-approver"):
        group_permissions_grant(apps, group=role, permissions=VIEW_CHECKPOINTS)


class Migration(migrations.Migration):

    dependencies = [
        ("eventlog", "0003_gauge_snapshot"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(roles, migrations.RunPython.noop)]
