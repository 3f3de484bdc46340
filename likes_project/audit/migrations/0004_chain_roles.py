"""The audit chain's permissions for the console's roles (D82): likes-viewer sees the chain's state (the
latest verification and checkpoint), as every role does; likes-operator also starts a verification."""

from django.db import migrations

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles

VIEW = [
    ("audit", "auditchainverification", "view_auditchainverification", "Can view audit chain verification"),
    ("audit", "auditchaincheckpoint", "view_auditchaincheckpoint", "Can view audit chain checkpoint"),
]
OPERATE = [
    ("audit", "auditchainverification", "verify_auditchain", "Can verify the audit chain"),
]


roles = console_roles(VIEW, operate=OPERATE)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_chain"),
        *ROLE_DEPENDENCIES,
    ]

    operations = [migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"})]
