# `risk` 0001_initial … 0004_risk_verdict, squashed (D133): what they leave on a new
# database, written once. A database that applied all of them records this one as applied and runs nothing.

import likes_project.model_kit
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('risk', '0001_initial'),
        ('risk', '0002_roles'),
        ('risk', '0003_account_kind'),
        ('risk', '0004_risk_verdict'),
    ]

    dependencies = [
    ]

    operations = [
        # The risk version: approvals take it in order, so a later decision's states win (never the reverse).
        migrations.RunSQL("CREATE SEQUENCE IF NOT EXISTS risk_version_seq", "DROP SEQUENCE IF EXISTS risk_version_seq"),
        migrations.CreateModel(
            name='RiskVerdict',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('user_id', models.BigIntegerField(db_index=True)),
                ('level', models.CharField(max_length=10)),
                ('score', models.IntegerField()),
                ('signals', models.JSONField(default=dict)),
                ('decision_id', models.BigIntegerField(blank=True, null=True)),
                ('status', models.CharField(choices=[('APPLIED', 'Applied'), ('AWAITING_APPROVAL', 'Awaiting Approval')], max_length=20)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'ordering': ['-id'],
            },
        ),
        migrations.CreateModel(
            name='RiskDecision',
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
                ('kind', models.CharField(choices=[('HIDE', 'Hide'), ('RESTORE', 'Restore'), ('ACCOUNT', 'Account')], max_length=8)),
                ('video_id', models.CharField(max_length=64)),
                ('restores', models.BigIntegerField(blank=True, null=True)),
                ('evidence', models.TextField(blank=True, default='')),
                ('requested_channel', models.CharField(max_length=16)),
                ('rejected_by', models.CharField(blank=True, default='', max_length=150)),
                ('status', models.CharField(choices=[('AWAITING_APPROVAL', 'Awaiting Approval'), ('APPROVED', 'Approved'), ('APPLYING', 'Applying'), ('APPLIED', 'Applied'), ('RESTORED', 'Restored'), ('REJECTED', 'Rejected'), ('FAILED', 'Failed')], default='AWAITING_APPROVAL', max_length=20)),
                ('risk_version', models.BigIntegerField(blank=True, null=True)),
                ('applied_users', models.PositiveIntegerField(default=0)),
            ],
            options={
                'ordering': ['-id'],
                'permissions': [('request_riskdecision', 'Can request a risk hide or restore'), ('approve_riskdecision', "Can approve another operator's risk hide or restore")],
                'abstract': False,
                'indexes': [models.Index(fields=['video_id', 'kind', 'status'], name='risk_video_idx')],
                'constraints': [models.CheckConstraint(condition=models.Q(('approved_by', ''), models.Q(('approved_by', models.F('requested_by')), _negated=True), _connector='OR'), name='risk_not_approved_by_requester'), models.CheckConstraint(condition=models.Q(('approved_by', ''), ('approved_hash', models.F('params_hash')), _connector='OR'), name='risk_approval_bound_to_params'), models.CheckConstraint(condition=models.Q(models.Q(('kind', 'HIDE'), ('restores__isnull', True)), models.Q(('kind', 'RESTORE'), ('restores__isnull', False)), ('kind', 'ACCOUNT'), _connector='OR'), name='risk_restore_names_hide'), models.CheckConstraint(condition=models.Q(models.Q(('kind', 'ACCOUNT'), _negated=True), models.Q(('restores__isnull', True), ('video_id', '')), _connector='OR'), name='risk_account_names_no_video')],
            },
            bases=(likes_project.model_kit.FinishedByStatus, models.Model),
        ),
        migrations.CreateModel(
            name='RiskRelationState',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('video_id', models.CharField(max_length=64)),
                ('user_id', models.BigIntegerField()),
                ('hidden', models.BooleanField()),
                ('risk_version', models.BigIntegerField()),
                ('decision_id', models.BigIntegerField()),
                ('updated_at', models.DateTimeField()),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('hidden', True)), fields=['video_id', 'user_id'], name='risk_hidden_idx')],
                'constraints': [models.UniqueConstraint(fields=('video_id', 'user_id'), name='uniq_risk_relation')],
            },
        ),
    ]
