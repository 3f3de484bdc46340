# Audit records name the ops job they ran in; existing grants on the audit log follow the model to
# its new app (the content type is renamed, so `view_auditrecord` grants are kept).

from django.db import migrations, models


def move_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    old = ContentType.objects.filter(app_label="opsconsole", model="auditrecord").first()
    if old is None:
        return  # a fresh database: post_migrate creates the new content type
    if ContentType.objects.filter(app_label="audit", model="auditrecord").exists():
        return
    old.app_label = "audit"
    old.save(update_fields=["app_label"])


def restore_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="audit", model="auditrecord").update(app_label="opsconsole")


class Migration(migrations.Migration):

    dependencies = [
        ("audit", "0001_initial"),
        ("opsconsole", "0002_auditrecord_moves_to_core"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditrecord",
            name="job_id",
            field=models.BigIntegerField(blank=True, db_index=True, null=True),
        ),
        migrations.RunPython(move_content_type, restore_content_type, hints={"family": "default"}),
    ]
