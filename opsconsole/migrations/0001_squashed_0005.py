# `opsconsole` 0001_initial … 0005_drill_records, squashed (D133): what they leave on a new
# database, written once. A database that applied all of them records this one as applied and runs nothing.

from django.db import migrations, models

from likes_project.migration_kit import ROLE_DEPENDENCIES, console_roles


# The console's roles (Django groups) as the squashed migrations left them: likes-viewer holds VIEW,
# likes-operator VIEW and OPERATE, likes-approver VIEW and APPROVE (a second person approves what an
# operator requests). A later migration that grants more adds its own `console_roles` step.
VIEW = [
    ('audit', 'auditchaincheckpoint', 'view_auditchaincheckpoint', 'Can view audit chain checkpoint'),
    ('audit', 'auditchainverification', 'view_auditchainverification', 'Can view audit chain verification'),
    ('audit', 'auditrecord', 'view_auditrecord', 'Can view audit record'),
    ('counting', 'bucketmigration', 'view_bucketmigration', 'Can view bucket migration'),
    ('counting', 'countrefreshswitch', 'view_countrefreshswitch', 'Can view count refresh switch'),
    ('counting', 'videolikecountvbucket', 'view_videolikecountvbucket', 'Can view video like count vbucket'),
    ('eventlog', 'consumercheckpoint', 'view_consumercheckpoint', 'Can view consumer checkpoint'),
    ('eventlog', 'consumerpartitionswitch', 'view_consumerpartitionswitch', 'Can view consumer partition switch'),
    ('eventlog', 'consumerswitch', 'view_consumerswitch', 'Can view consumer switch'),
    ('eventlog', 'deadletter', 'view_deadletter', 'Can view dead letter'),
    ('notifications', 'notifywindow', 'view_notifywindow', 'Can view notify window'),
    ('opsconsole', 'consolepermission', 'view_dashboard', "Can see the pipeline's health on the console's front page"),
    ('opsconsole', 'consolepermission', 'view_relation_lookup', 'Can look up relations, commands and outbox rows'),
    ('opsconsole', 'drillrecord', 'view_drillrecord', 'Can view drill record'),
    ('opsjobs', 'opsjob', 'view_opsjob', 'Can view ops job'),
    ('reconciliation', 'autorepairswitch', 'view_autorepairswitch', 'Can view auto-repair switch'),
    ('reconciliation', 'checkdiff', 'view_checkdiff', 'Can view check diff'),
    ('reconciliation', 'checkrun', 'view_checkrun', 'Can view check run'),
    ('reconciliation', 'difftransition', 'view_difftransition', 'Can view diff transition'),
    ('reconciliation', 'recoverysnapshot', 'view_recoverysnapshot', 'Can view recovery snapshot'),
    ('reconciliation', 'repairrequest', 'view_repairrequest', 'Can view repair request'),
    ('relations', 'likesreadonlyswitch', 'view_likesreadonlyswitch', 'Can view read-only switch'),
    ('relations', 'outboxpublisherswitch', 'view_outboxpublisherswitch', 'Can view publisher switch'),
    ('relations', 'relationslotmove', 'view_relationslotmove', 'Can view relation slot move'),
    ('risk', 'riskdecision', 'view_riskdecision', 'Can view risk decision'),
    ('subscriptions', 'subscription', 'view_subscription', 'Can view subscription'),
    ('subscriptions', 'subscriptionreplay', 'view_subscriptionreplay', 'Can view subscription replay'),
]
OPERATE = [
    ('audit', 'auditchainverification', 'verify_auditchain', 'Can verify the audit chain'),
    ('counting', 'bucketmigration', 'plan_bucketmigration', 'Can plan a virtual-bucket migration'),
    ('counting', 'countrefreshswitch', 'change_countrefreshswitch', 'Can change count refresh switch'),
    ('eventlog', 'consumerpartitionswitch', 'add_consumerpartitionswitch', 'Can add consumer partition switch'),
    ('eventlog', 'consumerpartitionswitch', 'change_consumerpartitionswitch', 'Can change consumer partition switch'),
    ('eventlog', 'consumerswitch', 'change_consumerswitch', 'Can change consumer switch'),
    ('eventlog', 'deadletter', 'requeue_deadletter', 'Can requeue dead letters'),
    ('reconciliation', 'autorepairswitch', 'add_autorepairswitch', 'Can add auto-repair switch'),
    ('reconciliation', 'autorepairswitch', 'change_autorepairswitch', 'Can change auto-repair switch'),
    ('reconciliation', 'checkdiff', 'triage_diff', 'Can take, fix or ignore reconciliation diffs'),
    ('reconciliation', 'checkrun', 'run_check', 'Can start reconciliation runs'),
    ('reconciliation', 'recoverysnapshot', 'create_snapshot', 'Can take, verify and test-restore recovery snapshots'),
    ('reconciliation', 'repairrequest', 'request_repair', 'Can request a count repair'),
    ('relations', 'likesreadonlyswitch', 'add_likesreadonlyswitch', 'Can add read-only switch'),
    ('relations', 'likesreadonlyswitch', 'change_likesreadonlyswitch', 'Can change read-only switch'),
    ('relations', 'outboxevent', 'requeue_outbox', 'Can requeue DEAD outbox rows'),
    ('relations', 'outboxpublisherswitch', 'add_outboxpublisherswitch', 'Can add publisher switch'),
    ('relations', 'outboxpublisherswitch', 'change_outboxpublisherswitch', 'Can change publisher switch'),
    ('relations', 'relationslotmove', 'plan_relationslotmove', 'Can plan a relation slot move'),
    ('risk', 'riskdecision', 'request_riskdecision', 'Can request a risk hide or restore'),
    ('subscriptions', 'subscription', 'manage_subscription', 'Can create, pause, resume and retire subscriptions'),
]
APPROVE = [
    ('counting', 'bucketmigration', 'approve_bucketmigration', 'Can approve, resume or abort a virtual-bucket migration'),
    ('reconciliation', 'repairrequest', 'approve_repair', "Can approve another operator's count repair"),
    ('relations', 'relationslotmove', 'approve_relationslotmove', 'Can approve, resume or abort a relation slot move'),
    ('risk', 'riskdecision', 'approve_riskdecision', "Can approve another operator's risk hide or restore"),
    ('subscriptions', 'subscriptionreplay', 'approve_subscriptionreplay', "Can approve a subscription's replay from the archive"),
]

roles = console_roles(VIEW, operate=OPERATE, approve=APPROVE)


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('opsconsole', '0001_initial'),
        ('opsconsole', '0002_auditrecord_moves_to_core'),
        ('opsconsole', '0003_redact_token_log_entries'),
        ('opsconsole', '0004_front_page'),
        ('opsconsole', '0005_drill_records'),
    ]

    dependencies = [
        *ROLE_DEPENDENCIES,
    ]

    operations = [
        migrations.CreateModel(
            name='ConsolePermission',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ],
            options={
                'permissions': [('view_relation_lookup', 'Can look up relations, commands and outbox rows'), ('view_dashboard', "Can see the pipeline's health on the console's front page")],
                'managed': False,
                'default_permissions': (),
            },
        ),
        migrations.CreateModel(
            name='GaugeSample',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField(unique=True)),
                ('values', models.JSONField(default=dict)),
            ],
            options={
                'ordering': ['-at'],
            },
        ),
        migrations.CreateModel(
            name='DrillRecord',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('drill', models.CharField(db_index=True, max_length=64)),
                ('spec_numbers', models.JSONField(blank=True, default=list)),
                ('run_id', models.CharField(max_length=32)),
                ('seed', models.BigIntegerField(blank=True, null=True)),
                ('stage', models.CharField(max_length=64)),
                ('topology', models.CharField(max_length=32)),
                ('code_version', models.CharField(max_length=64)),
                ('requested_by', models.CharField(max_length=150)),
                ('started_at', models.DateTimeField()),
                ('finished_at', models.DateTimeField()),
                ('expected', models.TextField()),
                ('actual', models.JSONField(default=dict)),
                ('verdict', models.CharField(choices=[('PASS', 'Pass'), ('FAIL', 'Fail'), ('ERROR', 'Error')], max_length=8)),
                ('open_issues', models.TextField(blank=True, default='')),
                ('history_file', models.CharField(blank=True, default='', max_length=512)),
            ],
            options={
                'ordering': ['-started_at', '-pk'],
                'indexes': [models.Index(fields=['-started_at'], name='drill_record_started')],
            },
        ),
        migrations.RunPython(roles, migrations.RunPython.noop, hints={"family": "default"}),
    ]
