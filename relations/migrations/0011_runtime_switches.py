# Runtime switches of the relations app (issue 14 §3): read-only likes and the outbox publisher's pause per
# relation shard, on `default`. Operators (likes-operator) set and clear them; every console role sees them.

from django.db import migrations, models

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles, pause_switch_fields

SWITCHES = [("likesreadonlyswitch", "read-only switch"), ("outboxpublisherswitch", "publisher switch")]
VIEW = [("relations", m, f"view_{m}", f"Can view {name}") for m, name in SWITCHES]
OPERATE = [("relations", m, f"{verb}_{m}", f"Can {verb} {name}") for m, name in SWITCHES for verb in ("add", "change")]


roles = console_roles(VIEW, operate=OPERATE)


class Migration(migrations.Migration):

    dependencies = [
        ("relations", "0010_likerelation_relation_video_idx_and_more"),
        *ROLE_DEPENDENCIES,
    ]

    operations = [
        migrations.CreateModel(
            name="LikesReadOnlySwitch",
            fields=[*pause_switch_fields(),
                    ("scope", models.CharField(default="global", max_length=16, primary_key=True, serialize=False))],
            options={"verbose_name": "read-only switch", "verbose_name_plural": "read-only switches"},
        ),
        migrations.CreateModel(
            name="OutboxPublisherSwitch",
            fields=[*pause_switch_fields(),
                    ("shard", models.CharField(max_length=64, primary_key=True, serialize=False))],
            options={"verbose_name": "publisher switch", "verbose_name_plural": "publisher switches"},
        ),
        migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"}),
    ]
