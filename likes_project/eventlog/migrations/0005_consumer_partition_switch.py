# A consumer's pause on one stream partition (issue 14 §3) on `default`, beside the whole-consumer switch:
# operators (likes-operator) set and clear it; every console role sees it.

from django.db import migrations, models

from likes_project.migration_kit import group_permissions_grant

VIEW = [("eventlog", "consumerpartitionswitch", "view_consumerpartitionswitch", "Can view consumer partition switch")]
OPERATE = [("eventlog", "consumerpartitionswitch", f"{verb}_consumerpartitionswitch",
            f"Can {verb} consumer partition switch") for verb in ("add", "change")]


def roles(apps, schema_editor):
    group_permissions_grant(apps, group="likes-viewer", permissions=VIEW)
    group_permissions_grant(apps, group="likes-operator", permissions=VIEW + OPERATE)
    group_permissions_grant(apps, group="likes-approver", permissions=VIEW)


class Migration(migrations.Migration):

    dependencies = [
        ("eventlog", "0004_console_roles_view_checkpoints"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.CreateModel(
            name="ConsumerPartitionSwitch",
            fields=[
                ("paused", models.BooleanField(default=False)),
                ("reason", models.CharField(blank=True, default="", max_length=256)),
                ("updated_by", models.CharField(blank=True, default="", max_length=150)),
                ("updated_at", models.DateTimeField(auto_now=True)),
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
