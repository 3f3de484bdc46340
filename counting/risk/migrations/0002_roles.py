"""The risk ledger's permissions for the roles: viewers see decisions, operators request hides and
restores, approvers approve another operator's."""

from django.db import migrations

from likes_project.migration_kit import console_roles

VIEW = [("risk", "riskdecision", "view_riskdecision", "Can view risk decision")]
OPERATE = [("risk", "riskdecision", "request_riskdecision", "Can request a risk hide or restore")]
APPROVE = [("risk", "riskdecision", "approve_riskdecision", "Can approve another operator's risk hide or restore")]


roles = console_roles(VIEW, operate=OPERATE, approve=APPROVE)


class Migration(migrations.Migration):
    dependencies = [
        ("risk", "0001_initial"),
        ("reconciliation", "0002_roles"),
    ]

    operations = [migrations.RunPython(roles, migrations.RunPython.noop)]
