# The recovery restore on the generation lifecycle (issue 29 §6): one row per restore (or test-restore) of a
# snapshot, with the lifecycle's columns and constraints (one ACTIVE, one building at a time), on `default`.

from django.db import migrations, models

from likes_project.migration_kit import LIFECYCLE_BUILDING, LIFECYCLE_STATUSES


class Migration(migrations.Migration):

    dependencies = [
        ("reconciliation", "0004_auto_repair_switch"),
    ]

    operations = [
        migrations.CreateModel(
            name="RecoveryRestore",
            fields=[
                ("generation", models.PositiveIntegerField(primary_key=True, serialize=False)),
                ("status", models.CharField(choices=LIFECYCLE_STATUSES, max_length=12)),
                ("previous_generation", models.PositiveIntegerField(blank=True, null=True)),
                ("job_id", models.BigIntegerField(blank=True, null=True)),
                ("progress", models.JSONField(blank=True, default=dict)),
                ("fencing_token", models.BigIntegerField(default=0)),
                ("started_by", models.CharField(blank=True, default="", max_length=150)),
                ("activated_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("failure_reason", models.CharField(blank=True, default="", max_length=512)),
                ("snapshot_id", models.BigIntegerField()),
                ("count_generation", models.PositiveIntegerField(unique=True)),
                ("replaced_generation", models.PositiveIntegerField()),
                ("scratch", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "abstract": False,
                "constraints": [
                    models.UniqueConstraint(condition=models.Q(("status", "ACTIVE")), fields=("status",),
                                            name="reconciliation_recoveryrestore_one_active"),
                    models.UniqueConstraint(models.Value(True), condition=models.Q(("status__in", LIFECYCLE_BUILDING)),
                                            name="reconciliation_recoveryrestore_one_building"),
                ],
            },
        ),
    ]
