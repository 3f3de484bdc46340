# The auto-repair pause (issue 14 §3) on `default`: operators (likes-operator) set and clear it; every
# console role sees it.

from django.db import migrations, models

from likes_project.migration_kit import group_permissions_grant

VIEW = [("reconciliation", "autorepairswitch", "view_autorepairswitch", "Can view auto-repair switch")]
OPERATE = [("reconciliation", "autorepairswitch", f"{verb}_autorepairswitch", f"Can {verb} auto-repair switch")
           for verb in ("add", "change")]


def roles(apps, schema_editor):
    group_permissions_grant(apps, group="likes-viewer", permissions=VIEW)
    group_permissions_grant(apps, group="likes-operator", permissions=VIEW + OPERATE)
    group_permissions_grant(apps, group="likes-approver", permissions=VIEW)


class Migration(migrations.Migration):

    dependencies = [
        ("reconciliation", "0003_recovery_snapshots"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.CreateModel(
            name="AutoRepairSwitch",
            fields=[
                ("paused", models.BooleanField(default=False)),
                ("reason", models.CharField(blank=True, default="", max_length=256)),
                ("updated_by", models.CharField(blank=True, default="", max_length=150)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("scope", models.CharField(default="global", max_length=16, primary_key=True, serialize=False)),
            ],
            options={"verbose_name": "auto-repair switch", "verbose_name_plural": "auto-repair switches"},
        ),
        migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"}),
    ]
