# `reconciliation` 0001_initial … 0006_policy_hidden_layer, squashed (D133): what they leave on a new
# database, written once. A database that applied all of them records this one as applied and runs nothing.

import django.db.models.deletion
import likes_project.model_kit
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('reconciliation', '0001_initial'),
        ('reconciliation', '0002_roles'),
        ('reconciliation', '0003_recovery_snapshots'),
        ('reconciliation', '0004_auto_repair_switch'),
        ('reconciliation', '0005_recoveryrestore'),
        ('reconciliation', '0006_policy_hidden_layer'),
    ]

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='AutoRepairSwitch',
            fields=[
                ('paused', models.BooleanField(default=False)),
                ('reason', models.CharField(blank=True, default='', max_length=256)),
                ('updated_by', models.CharField(blank=True, default='', max_length=150)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('scope', models.CharField(default='global', max_length=16, primary_key=True, serialize=False)),
            ],
            options={
                'verbose_name': 'auto-repair switch',
                'verbose_name_plural': 'auto-repair switches',
            },
        ),
        migrations.CreateModel(
            name='RecoverySnapshot',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(choices=[('BUILDING', 'Building'), ('SEALED', 'Sealed'), ('FAILED', 'Failed'), ('EXPIRED', 'Expired')], default='BUILDING', max_length=10)),
                ('reason', models.CharField(blank=True, default='', max_length=512)),
                ('started_by', models.CharField(max_length=150)),
                ('channel', models.CharField(blank=True, default='', max_length=16)),
                ('bucket_space_version', models.PositiveIntegerField(blank=True, null=True)),
                ('generation', models.PositiveIntegerField(blank=True, null=True)),
                ('manifest_id', models.BigIntegerField(blank=True, null=True)),
                ('stream_contract_version', models.PositiveIntegerField(blank=True, null=True)),
                ('offsets', models.JSONField(blank=True, default=list)),
                ('artifacts', models.JSONField(blank=True, default=list)),
                ('dead_letters_at_cut', models.JSONField(blank=True, default=list)),
                ('dispatch_paused_ms', models.FloatField(blank=True, null=True)),
                ('timings', models.JSONField(blank=True, default=dict)),
                ('failure', models.CharField(blank=True, default='', max_length=1024)),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('sealed_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('tested_at', models.DateTimeField(blank=True, null=True)),
                ('test_result', models.JSONField(blank=True, default=dict)),
            ],
            options={
                'ordering': ['-id'],
                'permissions': [('create_snapshot', 'Can take, verify and test-restore recovery snapshots')],
            },
        ),
        migrations.CreateModel(
            name='CheckRun',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('manual', 'Manual'), ('scheduled', 'Scheduled'), ('after_repair', 'After Repair'), ('after_migration', 'After Migration')], default='manual', max_length=16)),
                ('mode', models.CharField(choices=[('identity', 'Identity'), ('coverage', 'Coverage'), ('exact', 'Exact')], max_length=10)),
                ('status', models.CharField(choices=[('QUEUED', 'Queued'), ('RUNNING', 'Running'), ('PASSED', 'Passed'), ('FAILED', 'Failed'), ('REFUSED', 'Refused')], default='QUEUED', max_length=10)),
                ('schedule', models.CharField(blank=True, default='', max_length=64)),
                ('scope', models.JSONField(default=dict)),
                ('watermarks', models.JSONField(blank=True, default=dict)),
                ('checked', models.BigIntegerField(default=0)),
                ('diffs_found', models.PositiveIntegerField(default=0)),
                ('diffs_fixed', models.PositiveIntegerField(default=0)),
                ('skipped', models.JSONField(blank=True, default=list)),
                ('checkpoint', models.JSONField(blank=True, default=dict)),
                ('total', models.BigIntegerField(blank=True, null=True)),
                ('barrier_held_ms', models.FloatField(blank=True, null=True)),
                ('refused_because', models.CharField(blank=True, default='', max_length=512)),
                ('actor', models.CharField(max_length=150)),
                ('channel', models.CharField(max_length=16)),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('repair_id', models.BigIntegerField(blank=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'ordering': ['-id'],
                'permissions': [('run_check', 'Can start reconciliation runs')],
                'indexes': [models.Index(fields=['schedule', 'status', 'finished_at'], name='checkrun_schedule_idx')],
            },
            bases=(likes_project.model_kit.FinishedByStatus, models.Model),
        ),
        migrations.CreateModel(
            name='CheckDiff',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('video_id', models.CharField(max_length=64)),
                ('virtual_bucket', models.PositiveIntegerField(blank=True, null=True)),
                ('layer', models.CharField(choices=[('display', 'display snapshot vs buckets'), ('count_cache', 'count cache vs buckets'), ('buckets', 'buckets vs projection'), ('projection', 'projection vs facts'), ('policy_hidden', "policy-hidden count vs accounts' levels")], max_length=16)),
                ('expected', models.BigIntegerField()),
                ('actual', models.BigIntegerField()),
                ('detail', models.JSONField(blank=True, default=dict)),
                ('status', models.CharField(choices=[('NEW', 'New'), ('FIXING', 'Fixing'), ('FIXED', 'Fixed'), ('IGNORED', 'Ignored')], default='NEW', max_length=8)),
                ('owner', models.CharField(blank=True, default='', max_length=150)),
                ('reason', models.CharField(blank=True, default='', max_length=512)),
                ('status_changed_at', models.DateTimeField(blank=True, null=True)),
                ('repair_id', models.BigIntegerField(blank=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='diffs', to='reconciliation.checkrun')),
            ],
            options={
                'ordering': ['-id'],
                'permissions': [('triage_diff', 'Can take, fix or ignore reconciliation diffs')],
            },
        ),
        migrations.CreateModel(
            name='DiffTransition',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('from_status', models.CharField(max_length=8)),
                ('to_status', models.CharField(max_length=8)),
                ('actor', models.CharField(max_length=150)),
                ('reason', models.CharField(blank=True, default='', max_length=512)),
                ('at', models.DateTimeField(auto_now_add=True)),
                ('diff', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='transitions', to='reconciliation.checkdiff')),
            ],
            options={
                'ordering': ['id'],
            },
        ),
        migrations.CreateModel(
            name='RecoveryRestore',
            fields=[
                ('generation', models.PositiveIntegerField(primary_key=True, serialize=False)),
                ('status', models.CharField(choices=[('SHADOW', 'Shadow'), ('BACKFILLING', 'Backfilling'), ('CATCHING_UP', 'Catching Up'), ('VERIFYING', 'Verifying'), ('ACTIVE', 'Active'), ('FAILED', 'Failed'), ('RETIRED', 'Retired')], max_length=12)),
                ('previous_generation', models.PositiveIntegerField(blank=True, null=True)),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('progress', models.JSONField(blank=True, default=dict)),
                ('fencing_token', models.BigIntegerField(default=0)),
                ('started_by', models.CharField(blank=True, default='', max_length=150)),
                ('activated_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('failure_reason', models.CharField(blank=True, default='', max_length=512)),
                ('snapshot_id', models.BigIntegerField()),
                ('count_generation', models.PositiveIntegerField(unique=True)),
                ('replaced_generation', models.PositiveIntegerField()),
                ('scratch', models.BooleanField(default=False)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'abstract': False,
                'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'ACTIVE')), fields=('status',), name='reconciliation_recoveryrestore_one_active'), models.UniqueConstraint(models.Value(True), condition=models.Q(('status__in', ('SHADOW', 'BACKFILLING', 'CATCHING_UP', 'VERIFYING'))), name='reconciliation_recoveryrestore_one_building')],
            },
        ),
        migrations.CreateModel(
            name='RepairRequest',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('params', models.JSONField()),
                ('params_hash', models.CharField(max_length=64)),
                ('reason', models.CharField(max_length=512)),
                ('requested_by', models.CharField(max_length=150)),
                ('approved_by', models.CharField(blank=True, default='', max_length=150)),
                ('approved_hash', models.CharField(blank=True, default='', max_length=64)),
                ('approved_at', models.DateTimeField(blank=True, null=True)),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('error', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('requested_channel', models.CharField(max_length=16)),
                ('status', models.CharField(choices=[('AWAITING_APPROVAL', 'Awaiting Approval'), ('APPROVED', 'Approved'), ('RUNNING', 'Running'), ('SUCCEEDED', 'Succeeded'), ('FAILED', 'Failed'), ('VOID', 'Void')], default='AWAITING_APPROVAL', max_length=20)),
                ('watermarks_before', models.JSONField(blank=True, default=dict)),
                ('watermarks_after', models.JSONField(blank=True, default=dict)),
                ('before', models.JSONField(blank=True, default=dict)),
                ('after', models.JSONField(blank=True, default=dict)),
                ('result', models.JSONField(blank=True, default=dict)),
                ('verify_run_id', models.BigIntegerField(blank=True, null=True)),
            ],
            options={
                'ordering': ['-id'],
                'permissions': [('request_repair', 'Can request a count repair'), ('approve_repair', "Can approve another operator's count repair")],
                'abstract': False,
                'constraints': [models.CheckConstraint(condition=models.Q(('approved_by', ''), models.Q(('approved_by', models.F('requested_by')), _negated=True), _connector='OR'), name='repair_not_approved_by_requester'), models.CheckConstraint(condition=models.Q(('approved_by', ''), ('approved_hash', models.F('params_hash')), _connector='OR'), name='repair_approval_bound_to_params')],
            },
            bases=(likes_project.model_kit.FinishedByStatus, models.Model),
        ),
        migrations.AddIndex(
            model_name='checkdiff',
            index=models.Index(fields=['video_id', 'status'], name='checkdiff_video_idx'),
        ),
    ]
