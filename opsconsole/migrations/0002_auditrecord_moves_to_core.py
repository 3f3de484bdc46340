# The audit log's model moves to the core audit app (its table stays). The console keeps its
# lookup permission on a table-less holder model; an existing `view_relation_lookup` permission row
# (and every grant of it) is moved onto the holder's content type, so `opsconsole.view_relation_lookup`
# keeps meaning what it meant.

from django.db import migrations, models


def move_lookup_permission(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    old_ct = ContentType.objects.filter(app_label="opsconsole", model="auditrecord").first()
    if old_ct is None:
        return  # a fresh database: post_migrate creates the permission on the holder
    holder, _ = ContentType.objects.get_or_create(app_label="opsconsole", model="consolepermission")
    Permission.objects.filter(content_type=old_ct, codename="view_relation_lookup").update(content_type=holder)


def restore_lookup_permission(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    holder = ContentType.objects.filter(app_label="opsconsole", model="consolepermission").first()
    old_ct = ContentType.objects.filter(app_label="opsconsole", model="auditrecord").first()
    if holder is not None and old_ct is not None:
        Permission.objects.filter(content_type=holder, codename="view_relation_lookup").update(content_type=old_ct)


class Migration(migrations.Migration):

    dependencies = [
        ("opsconsole", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.CreateModel(
            name="ConsolePermission",
            fields=[("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID"))],
            options={
                "managed": False,
                "default_permissions": (),
                "permissions": [("view_relation_lookup", "Can look up relations, commands and outbox rows")],
            },
        ),
        migrations.RunPython(move_lookup_permission, restore_lookup_permission, hints={"family": "default"}),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="AuditRecord")],
            database_operations=[],
        ),
    ]
