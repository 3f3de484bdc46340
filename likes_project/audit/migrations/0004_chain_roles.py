"""The audit chain's permissions for the console's roles (D82): likes-viewer sees the chain's state (the
latest verification and checkpoint), as every role does; likes-operator also starts a verification."""

from django.db import migrations

from likes_project.migration_kit import group_permissions_grant

VIEW = [
    ("audit", "auditchainverification", "view_auditchainverification", "Can view audit chain verification"),
    ("audit", "auditchaincheckpoint", "view_auditchaincheckpoint", "Can view audit chain checkpoint"),
]
OPERATE = [
    ("audit", "auditchainverification", "verify_auditchain", "Can verify the audit chain"),
]


def roles(apps, schema_editor):
    group_permissions_grant(apps, group="likes-viewer", permissions=VIEW)
    group_permissions_grant(apps, group="likes-operator", permissions=VIEW + OPERATE)
    group_permissions_grant(apps, group="likes-approver", permissions=VIEW)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_chain"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"})]
