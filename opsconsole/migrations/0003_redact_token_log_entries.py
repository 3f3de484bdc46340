# DRF's admin logged each token it added under the token's `__str__`, which is its key, and old DRF
# versions registered the concrete Token, whose object id is the key too: the admin's "Recent actions"
# and history pages would show those keys (issue 10, D48). Both are redacted; the entries stay.

from django.db import migrations


def redact(apps, schema_editor):
    LogEntry = apps.get_model("admin", "LogEntry")
    entries = LogEntry.objects.filter(content_type__app_label="authtoken")
    entries.exclude(object_repr="API token (key redacted)").update(object_repr="API token (key redacted)")
    entries.filter(content_type__model="token").exclude(object_id=None).update(object_id=None)


class Migration(migrations.Migration):

    dependencies = [
        ("opsconsole", "0002_auditrecord_moves_to_core"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(redact, migrations.RunPython.noop, hints={"family": "default"}),
    ]
