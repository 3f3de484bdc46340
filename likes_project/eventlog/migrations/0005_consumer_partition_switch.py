# A consumer's pause on one stream partition (issue 14 §3) on `default`, beside the whole-consumer switch:
# operators (likes-operator) set and clear it; every console role sees it.

from django.db import migrations, models

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles, pause_switch_fields

VIEW = [("eventlog", "consumerpartitionswitch", "view_consumerpartitionswitch", "Can view consumer partition switch")]
OPERATE = [("eventlog", "consumerpartitionswitch", f"{verb}_consumerpartitionswitch",
            f"Can {verb} consumer partition switch") for verb in ("add", "change")]


roles = console_roles(VIEW, operate=OPERATE)


class Migration(migrations.Migration):

    dependencies = [
        ("eventlog", "0004_console_roles_view_checkpoints"),
        *ROLE_DEPENDENCIES,
    ]

    operations = [
        migrations.CreateModel(
            name="ConsumerPartitionSwitch",
            fields=[
                *pause_switch_fields(),
                ("key", models.CharField(max_length=80, primary_key=True, serialize=False)),
                ("consumer", models.CharField(max_length=64)),
                ("partition", models.PositiveIntegerField()),
            ],
            options={"constraints": [models.UniqueConstraint(fields=("consumer", "partition"),
                                                             name="uniq_consumer_partition_switch")],
                     "verbose_name": "consumer partition switch",
                     "verbose_name_plural": "consumer partition switches"},
        ),
        migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"}),
    ]
