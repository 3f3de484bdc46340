"""The console's roles (issue 11 §4) as Django groups: likes-viewer reads the console; likes-operator
also starts checks, triages diffs, requests repairs, pauses consumers and refreshes, and redrives;
likes-approver also approves another operator's repair. Superusers hold every permission anyway."""

from django.db import migrations

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles

VIEW = [
    ("reconciliation", "checkrun", "view_checkrun", "Can view check run"),
    ("reconciliation", "checkdiff", "view_checkdiff", "Can view check diff"),
    ("reconciliation", "difftransition", "view_difftransition", "Can view diff transition"),
    ("reconciliation", "repairrequest", "view_repairrequest", "Can view repair request"),
    ("opsjobs", "opsjob", "view_opsjob", "Can view ops job"),
    ("audit", "auditrecord", "view_auditrecord", "Can view audit record"),
    ("eventlog", "deadletter", "view_deadletter", "Can view dead letter"),
    ("eventlog", "consumerswitch", "view_consumerswitch", "Can view consumer switch"),
    ("counting", "videolikecountvbucket", "view_videolikecountvbucket", "Can view video like count vbucket"),
    ("counting", "countrefreshswitch", "view_countrefreshswitch", "Can view count refresh switch"),
    ("opsconsole", "consolepermission", "view_relation_lookup", "Can look up relations, commands and outbox rows"),
]
OPERATE = [
    ("reconciliation", "checkrun", "run_check", "Can start reconciliation runs"),
    ("reconciliation", "checkdiff", "triage_diff", "Can take, fix or ignore reconciliation diffs"),
    ("reconciliation", "repairrequest", "request_repair", "Can request a count repair"),
    ("eventlog", "consumerswitch", "change_consumerswitch", "Can change consumer switch"),
    ("counting", "countrefreshswitch", "change_countrefreshswitch", "Can change count refresh switch"),
    ("eventlog", "deadletter", "requeue_deadletter", "Can requeue dead letters"),
    ("relations", "outboxevent", "requeue_outbox", "Can requeue DEAD outbox rows"),
]
APPROVE = [
    ("reconciliation", "repairrequest", "approve_repair", "Can approve another operator's count repair"),
]


roles = console_roles(VIEW, operate=OPERATE, approve=APPROVE)


class Migration(migrations.Migration):
    dependencies = [
        ("reconciliation", "0001_initial"),
        *ROLE_DEPENDENCIES,
    ]

    operations = [migrations.RunPython(roles, migrations.RunPython.noop)]
