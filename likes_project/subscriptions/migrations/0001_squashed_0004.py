# `subscriptions` 0001_initial … 0004_replay_roles, squashed (D133): what they leave on a new
# database, written once. A database that applied all of them records this one as applied and runs nothing.

import django.db.models.deletion
import likes_project.model_kit
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('subscriptions', '0001_initial'),
        ('subscriptions', '0002_roles'),
        ('subscriptions', '0003_replay'),
        ('subscriptions', '0004_replay_roles'),
    ]

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='Subscription',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=64, unique=True)),
                ('owner', models.CharField(max_length=150)),
                ('purpose', models.TextField()),
                ('fields', models.JSONField()),
                ('start_from', models.CharField(max_length=8)),
                ('max_lag_s', models.FloatField()),
                ('alert_lag_s', models.FloatField()),
                ('status', models.CharField(choices=[('ACTIVE', 'Active'), ('PAUSED', 'Paused'), ('BEHIND_RETENTION', 'Behind Retention'), ('REPLAYING', 'Replaying'), ('RETIRED', 'Retired')], default='ACTIVE', max_length=20)),
                ('token_hash', models.CharField(max_length=64, unique=True)),
                ('pseudonym_key', models.CharField(max_length=64)),
                ('position', models.JSONField(blank=True, default=dict)),
                ('created_by', models.CharField(max_length=150)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('status_changed_at', models.DateTimeField(auto_now_add=True)),
                ('status_reason', models.TextField(blank=True, default='')),
                ('last_ack_at', models.DateTimeField(blank=True, null=True)),
                ('notices_acked', models.BigIntegerField(default=0)),
            ],
            options={
                'ordering': ['name'],
                'permissions': [('manage_subscription', 'Can create, pause, resume and retire subscriptions')],
                'constraints': [models.CheckConstraint(condition=models.Q(('start_from__in', ['earliest', 'latest'])), name='subscription_start_from_known')],
            },
        ),
        migrations.CreateModel(
            name='SubscriptionNotice',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('event_id', models.UUIDField()),
                ('type', models.CharField(max_length=32)),
                ('user_id', models.BigIntegerField(null=True)),
                ('at', models.DateTimeField()),
                ('event', models.JSONField(blank=True, null=True)),
                ('subscription', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='notices', to='subscriptions.subscription')),
            ],
            options={
                'indexes': [models.Index(fields=['subscription', 'id'], name='subscription_notice_pos_idx')],
                'constraints': [models.UniqueConstraint(fields=('subscription', 'event_id'), name='uniq_subscription_notice')],
            },
        ),
        migrations.CreateModel(
            name='SubscriptionReplay',
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
                ('rejected_by', models.CharField(blank=True, default='', max_length=150)),
                ('status', models.CharField(choices=[('AWAITING_APPROVAL', 'Awaiting Approval'), ('APPROVED', 'Approved'), ('DONE', 'Done'), ('FAILED', 'Failed'), ('REJECTED', 'Rejected')], default='AWAITING_APPROVAL', max_length=20)),
                ('replayed', models.BigIntegerField(default=0)),
                ('subscription', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='replays', to='subscriptions.subscription')),
            ],
            options={
                'ordering': ['-id'],
                'permissions': [('approve_subscriptionreplay', "Can approve a subscription's replay from the archive")],
                'abstract': False,
                'constraints': [models.CheckConstraint(condition=models.Q(('approved_by', ''), models.Q(('approved_by', models.F('requested_by')), _negated=True), _connector='OR'), name='subscription_replay_not_approved_by_requester'), models.CheckConstraint(condition=models.Q(('approved_by', ''), ('approved_hash', models.F('params_hash')), _connector='OR'), name='subscription_replay_approval_bound_to_params')],
            },
            bases=(likes_project.model_kit.FinishedByStatus, models.Model),
        ),
    ]
