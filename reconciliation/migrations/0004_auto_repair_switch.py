# The auto-repair pause (issue 14 §3) on `default`: operators (likes-operator) set and clear it; every
# console role sees it.

from django.db import migrations, models

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles, pause_switch_fields

VIEW = [("reconciliation", "autorepairswitch", "view_autorepairswitch", "Can view auto-repair switch")]
OPERATE = [("reconciliation", "autorepairswitch", f"{verb}_autorepairswitch", f"Can {verb} auto-repair switch")
           for verb in ("add", "change")]


roles = console_roles(VIEW, operate=OPERATE)


class Migration(migrations.Migration):

    dependencies = [
        ("reconciliation", "0003_recovery_snapshots"),
        *ROLE_DEPENDENCIES,
    ]

    operations = [
        migrations.CreateModel(
            name="AutoRepairSwitch",
            fields=[
                *pause_switch_fields(),
                ("scope", models.CharField(default="global", max_length=16, primary_key=True, serialize=False)),
            ],
            options={"verbose_name": "auto-repair switch", "verbose_name_plural": "auto-repair switches"},
        ),
        migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"}),
    ]
