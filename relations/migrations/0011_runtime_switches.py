# Runtime switches of the relations app (issue 14 §3): read-only likes and the outbox publisher's pause per
# relation shard, on `default`. Operators (likes-operator) set and clear them; every console role sees them.

from django.db import migrations, models

from likes_project.migration_kit import group_permissions_grant

SWITCHES = [("likesreadonlyswitch", "read-only switch"), ("outboxpublisherswitch", "publisher switch")]
VIEW = [("relations", m, f"view_{m}", f"Can view {name}") for m, name in SWITCHES]
OPERATE = [("relations", m, f"{verb}_{m}", f"Can {verb} {name}") for m, name in SWITCHES for verb in ("add", "change")]


def roles(apps, schema_editor):
    group_permissions_grant(apps, group="likes-viewer", permissions=VIEW)
    group_permissions_grant(apps, group="likes-operator", permissions=VIEW + OPERATE)
    group_permissions_grant(apps, group="likes-approver", permissions=VIEW)


def _switch_fields():
    return [
        ("paused", models.BooleanField(default=False)),
        ("reason", models.CharField(blank=True, default="", max_length=256)),
        ("updated_by", models.CharField(blank=True, default="", max_length=150)),
        ("updated_at", models.DateTimeField(auto_now=True)),
    ]


class Migration(migrations.Migration):

    dependencies = [
        ("relations", "0010_likerelation_relation_video_idx_and_more"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.CreateModel(
            name="LikesReadOnlySwitch",
            fields=[*_switch_fields(),
                    ("scope", models.CharField(default="global", max_length=16, primary_key=True, serialize=False))],
            options={"verbose_name": "read-only switch", "verbose_name_plural": "read-only switches"},
        ),
        migrations.CreateModel(
            name="OutboxPublisherSwitch",
            fields=[*_switch_fields(),
                    ("shard", models.CharField(max_length=64, primary_key=True, serialize=False))],
            options={"verbose_name": "publisher switch", "verbose_name_plural": "publisher switches"},
        ),
        migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"}),
    ]
