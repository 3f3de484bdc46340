# The audit log moves from `opsconsole` into the core audit app. The table stays where it is
# (`opsconsole_auditrecord`): only Django's state changes, so no data is copied (on a fresh database
# opsconsole 0001 creates the table first), and its content type moves, so `view_auditrecord` grants
# are kept. Records name the ops job they ran in (`job_id`).

from django.db import migrations, models


def move_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label="audit", model="auditrecord").exists():
        ContentType.objects.filter(app_label="opsconsole", model="auditrecord").update(app_label="audit")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("opsconsole", "0002_auditrecord_moves_to_core"),
        ("contenttypes", "0002_remove_content_type_name"),
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
        migrations.AddField(
            model_name="auditrecord", name="job_id", field=models.BigIntegerField(blank=True, db_index=True, null=True),
        ),
        migrations.RunPython(move_content_type, migrations.RunPython.noop, hints={"family": "default"}),
    ]
