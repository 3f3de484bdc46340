# The relations app's history up to 0006 (all applied on every database created before the layers
# issue), squashed: a fresh database applies this; an existing one has its replaced migrations recorded.

from django.db import migrations, models

from likes_project.migration_kit import reverse_index_tables_v1


class Migration(migrations.Migration):

    replaces = [('relations', '0001_initial'), ('relations', '0002_outboxarchive_outboxevent_stream_entry_ms_and_more'), ('relations', '0003_cachegeneration_likerelationcacheprojection'), ('relations', '0004_likereverseprojection_likereversesort_and_more'), ('relations', '0005_accountstatus_userprivacy_videolikersvisibility'), ('relations', '0006_likereverserecent')]

    initial = True

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='Block',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('blocker_id', models.BigIntegerField()),
                ('blocked_id', models.BigIntegerField()),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('blocker_id', 'blocked_id'), name='uniq_block')],
            },
        ),
        migrations.CreateModel(
            name='Friendship',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('user_low', models.BigIntegerField()),
                ('user_high', models.BigIntegerField()),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('user_low', 'user_high'), name='uniq_friendship'), models.CheckConstraint(condition=models.Q(('user_low__lt', models.F('user_high'))), name='friendship_ordered')],
            },
        ),
        migrations.CreateModel(
            name='LikeCommand',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('user_id', models.BigIntegerField()),
                ('operation_id', models.CharField(max_length=128)),
                ('video_id', models.CharField(max_length=64)),
                ('desired_state', models.CharField(choices=[('LIKED', 'Liked'), ('UNLIKED', 'Unliked')], max_length=8)),
                ('result_state', models.CharField(choices=[('LIKED', 'Liked'), ('UNLIKED', 'Unliked')], max_length=8)),
                ('result_version', models.BigIntegerField()),
                ('changed', models.BooleanField()),
                ('base_version', models.BigIntegerField(null=True)),
                ('device_id', models.CharField(blank=True, default='', max_length=128)),
                ('client_sequence', models.BigIntegerField(null=True)),
                ('created_at', models.DateTimeField()),
            ],
            options={
                'indexes': [models.Index(fields=['created_at'], name='command_created_idx')],
                'constraints': [models.UniqueConstraint(fields=('user_id', 'operation_id'), name='uniq_command_user_operation')],
            },
        ),
        migrations.CreateModel(
            name='LikeRelation',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('user_id', models.BigIntegerField()),
                ('video_id', models.CharField(max_length=64)),
                ('state', models.CharField(choices=[('LIKED', 'Liked'), ('UNLIKED', 'Unliked')], max_length=8)),
                ('relation_version', models.BigIntegerField()),
                ('last_operation_id', models.CharField(max_length=128)),
                ('state_changed_at', models.DateTimeField()),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
            ],
            options={
                'indexes': [models.Index(models.F('user_id'), models.F('state'), models.OrderBy(models.F('updated_at'), descending=True), models.OrderBy(models.F('video_id'), descending=True), name='relation_user_list_idx')],
                'constraints': [models.UniqueConstraint(fields=('user_id', 'video_id'), name='uniq_relation_user_video'), models.CheckConstraint(condition=models.Q(('relation_version__gte', 1)), name='relation_version_positive'), models.CheckConstraint(condition=models.Q(('state__in', ['LIKED', 'UNLIKED'])), name='relation_state_valid')],
            },
        ),
        migrations.CreateModel(
            name='RelationShardContract',
            fields=[
                ('version', models.PositiveIntegerField(primary_key=True, serialize=False)),
                ('hash_algorithm', models.CharField(max_length=32)),
                ('hash_seed', models.CharField(max_length=64)),
                ('key_encoding', models.CharField(max_length=32)),
                ('logical_slots', models.PositiveIntegerField()),
                ('is_active', models.BooleanField(default=False)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'constraints': [models.UniqueConstraint(condition=models.Q(('is_active', True)), fields=('is_active',), name='one_active_shard_contract'), models.CheckConstraint(condition=models.Q(('logical_slots__gt', 0)), name='shard_contract_slots_positive')],
            },
        ),
        migrations.CreateModel(
            name='RelationShardSlot',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('contract_version', models.PositiveIntegerField()),
                ('slot', models.PositiveIntegerField()),
                ('alias', models.CharField(max_length=32)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('contract_version', 'slot'), name='uniq_shard_slot')],
            },
        ),
        migrations.CreateModel(
            name='VideoSnapshot',
            fields=[
                ('video_id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('author_id', models.BigIntegerField(db_index=True)),
                ('visibility', models.CharField(choices=[('public', 'Public'), ('friends', 'Friends'), ('private', 'Private')], default='public', max_length=16)),
                ('status', models.CharField(choices=[('active', 'Active'), ('taken_down', 'Taken Down'), ('deleted', 'Deleted')], default='active', max_length=16)),
                ('version', models.BigIntegerField(default=1)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'constraints': [models.CheckConstraint(condition=models.Q(('version__gte', 0)), name='video_version_non_negative')],
            },
        ),
        migrations.CreateModel(
            name='OutboxArchive',
            fields=[
                ('id', models.BigIntegerField(primary_key=True, serialize=False)),
                ('event_id', models.UUIDField(unique=True)),
                ('aggregate_key', models.CharField(max_length=96)),
                ('relation_version', models.BigIntegerField()),
                ('event_type', models.CharField(max_length=48)),
                ('schema_version', models.PositiveSmallIntegerField()),
                ('payload', models.JSONField()),
                ('stream_key', models.CharField(max_length=64)),
                ('stream_entry_id', models.CharField(max_length=32)),
                ('created_at', models.DateTimeField()),
                ('published_at', models.DateTimeField()),
                ('archived_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='OutboxEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('event_id', models.UUIDField(unique=True)),
                ('aggregate_key', models.CharField(max_length=96)),
                ('relation_version', models.BigIntegerField()),
                ('event_type', models.CharField(max_length=48)),
                ('schema_version', models.PositiveSmallIntegerField()),
                ('payload', models.JSONField()),
                ('xact_id', models.BigIntegerField()),
                ('status', models.CharField(choices=[('NEW', 'New'), ('PUBLISHING', 'Publishing'), ('RETRY', 'Retry'), ('UNCERTAIN', 'Uncertain'), ('SENT', 'Sent'), ('DEAD', 'Dead')], default='NEW', max_length=12)),
                ('retry_count', models.PositiveIntegerField(default=0)),
                ('next_retry_at', models.DateTimeField()),
                ('claimed_by', models.CharField(blank=True, default='', max_length=64)),
                ('claim_expires_at', models.DateTimeField(null=True)),
                ('last_error', models.CharField(blank=True, default='', max_length=1024)),
                ('stream_key', models.CharField(blank=True, default='', max_length=64)),
                ('stream_entry_id', models.CharField(blank=True, default='', max_length=32)),
                ('created_at', models.DateTimeField()),
                ('published_at', models.DateTimeField(null=True)),
                ('stream_entry_ms', models.BigIntegerField(null=True)),
                ('stream_entry_seq', models.BigIntegerField(null=True)),
                ('stream_partition', models.PositiveIntegerField(null=True)),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('status__in', ['NEW', 'RETRY', 'UNCERTAIN'])), fields=['next_retry_at'], name='outbox_pending_idx'), models.Index(fields=['created_at'], name='outbox_created_idx'), models.Index(fields=['status', 'id'], name='outbox_status_idx'), models.Index(condition=models.Q(('status', 'SENT')), fields=['stream_partition', 'stream_entry_ms'], name='outbox_stream_pos_idx')],
                'constraints': [models.UniqueConstraint(fields=('aggregate_key', 'relation_version', 'event_type'), name='uniq_outbox_aggregate_version')],
            },
        ),
        migrations.CreateModel(
            name='CacheGeneration',
            fields=[
                ('generation', models.PositiveIntegerField(primary_key=True, serialize=False)),
                ('status', models.CharField(choices=[('REBUILDING', 'Rebuilding'), ('ACTIVE', 'Active'), ('FAILED', 'Failed'), ('RETIRED', 'Retired')], max_length=12)),
                ('baseline_watermark', models.JSONField(default=dict)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('activated_at', models.DateTimeField(null=True)),
                ('finished_at', models.DateTimeField(null=True)),
                ('failure_reason', models.CharField(blank=True, default='', max_length=512)),
            ],
            options={
                'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'ACTIVE')), fields=('status',), name='one_active_cache_gen'), models.UniqueConstraint(condition=models.Q(('status', 'REBUILDING')), fields=('status',), name='one_rebuilding_cache_gen')],
            },
        ),
        migrations.CreateModel(
            name='LikeRelationCacheProjection',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('cache_generation', models.PositiveIntegerField()),
                ('user_id', models.BigIntegerField()),
                ('video_id', models.CharField(max_length=64)),
                ('state', models.CharField(choices=[('LIKED', 'Liked'), ('UNLIKED', 'Unliked')], max_length=8)),
                ('relation_version', models.BigIntegerField()),
                ('updated_at', models.DateTimeField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('cache_generation', 'user_id', 'video_id'), name='uniq_relcache_floor')],
            },
        ),
        migrations.CreateModel(
            name='AccountStatus',
            fields=[
                ('user_id', models.BigIntegerField(primary_key=True, serialize=False)),
                ('status', models.CharField(choices=[('active', 'Active'), ('banned', 'Banned'), ('deleted', 'Deleted')], default='active', max_length=8)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.CreateModel(
            name='UserPrivacy',
            fields=[
                ('user_id', models.BigIntegerField(primary_key=True, serialize=False)),
                ('likes_private', models.BooleanField(default=False)),
                ('likers_public', models.BooleanField(default=False)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.CreateModel(
            name='VideoLikersVisibility',
            fields=[
                ('video_id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('likers_public', models.BooleanField()),
            ],
        ),
        # The who-liked reverse index's tables, created here on a fresh database as the history did; their
        # models have belonged to `counting` since (counting 0002 holds their state), so the state skips them.
        migrations.SeparateDatabaseAndState(database_operations=reverse_index_tables_v1(), state_operations=[]),
    ]
