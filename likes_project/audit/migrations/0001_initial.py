# The audit log moves from `opsconsole` into the core audit app. The table stays where it is
# (`opsconsole_auditrecord`): only Django's state changes, so no data is copied. On a fresh database
# opsconsole 0001 creates the table first.

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("opsconsole", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditRecord",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("actor", models.CharField(max_length=150)),
                        ("channel", models.CharField(max_length=16)),
                        ("action", models.CharField(db_index=True, max_length=64)),
                        ("target_type", models.CharField(max_length=32)),
                        ("target_id", models.CharField(db_index=True, max_length=128)),
                        ("params", models.JSONField(default=dict)),
                        ("outcome", models.CharField(default="applied", max_length=32)),
                    ],
                    options={"db_table": "opsconsole_auditrecord", "ordering": ["-at"]},
                ),
            ],
            database_operations=[],
        ),
    ]
