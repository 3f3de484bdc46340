# `relations` 0001_history … 0019_video_published_at, squashed (D133): what they leave on a new
# database, written once. A database that applied all of them records this one as applied and runs nothing.

import django.db.models.functions.comparison
from django.db import migrations, models

from likes_project.migration_kit import sql_file

_SHARD = {"family": "relation_shard"}
APPLY_DROP = ("DROP FUNCTION IF EXISTS likes_relation_apply(bigint, text, text, text, bigint, text, bigint, "
              "timestamptz, text, uuid, text, text, integer, boolean, boolean, integer, integer, integer, integer)")
# The tombstone sweep's index (relations.services.tombstones): UNLIKED relations by state_changed_at. Plain SQL,
# not a Meta index of LikeRelation (it was built CONCURRENTLY on a live shard, issue 31 §4).
TOMBSTONE_INDEX = ("CREATE INDEX IF NOT EXISTS relation_tombstone_age_idx "
                   "ON relations_likerelation (state_changed_at, id) WHERE state = 'UNLIKED'")


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('relations', '0001_history'),
        ('relations', '0007_layers_and_lifecycle'),
        ('relations', '0008_outbox_requeue_permission'),
        ('relations', '0009_video_operator_override'),
        ('relations', '0010_likerelation_relation_video_idx_and_more'),
        ('relations', '0011_runtime_switches'),
        ('relations', '0012_likers_export_permission'),
        ('relations', '0013_relation_apply_function'),
        ('relations', '0014_slot_moves'),
        ('relations', '0015_version_floor'),
        ('relations', '0016_tombstone_age_index'),
        ('relations', '0017_plural_names'),
        ('relations', '0018_account_risk_level'),
        ('relations', '0019_video_published_at'),
    ]

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='AccountStatus',
            fields=[
                ('user_id', models.BigIntegerField(primary_key=True, serialize=False)),
                ('status', models.CharField(choices=[('active', 'Active'), ('banned', 'Banned'), ('deleted', 'Deleted')], default='active', max_length=8)),
                ('risk_level', models.CharField(choices=[('none', 'None'), ('downweight', 'Downweight'), ('freeze', 'Freeze')], db_default='none', default='none', max_length=10)),
                ('risk_version', models.BigIntegerField(db_default=0, default=0)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name_plural': 'account statuses',
            },
        ),
        migrations.CreateModel(
            name='LikesReadOnlySwitch',
            fields=[
                ('paused', models.BooleanField(default=False)),
                ('reason', models.CharField(blank=True, default='', max_length=256)),
                ('updated_by', models.CharField(blank=True, default='', max_length=150)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('scope', models.CharField(default='global', max_length=16, primary_key=True, serialize=False)),
            ],
            options={
                'verbose_name': 'read-only switch',
                'verbose_name_plural': 'read-only switches',
            },
        ),
        migrations.CreateModel(
            name='OutboxPublisherSwitch',
            fields=[
                ('paused', models.BooleanField(default=False)),
                ('reason', models.CharField(blank=True, default='', max_length=256)),
                ('updated_by', models.CharField(blank=True, default='', max_length=150)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('shard', models.CharField(max_length=64, primary_key=True, serialize=False)),
            ],
            options={
                'verbose_name': 'publisher switch',
                'verbose_name_plural': 'publisher switches',
            },
        ),
        migrations.CreateModel(
            name='RelationSlotState',
            fields=[
                ('slot', models.IntegerField(primary_key=True, serialize=False)),
                ('state', models.CharField(choices=[('CAPTURING', 'Capturing'), ('INCOMING', 'Incoming'), ('MOVED_OUT', 'Moved Out')], max_length=12)),
                ('move_id', models.BigIntegerField()),
                ('hash_seed', models.CharField(max_length=64)),
                ('logical_slots', models.IntegerField()),
                ('changed_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='RelationVersionFloor',
            fields=[
                ('slot', models.IntegerField(primary_key=True, serialize=False)),
                ('floor', models.BigIntegerField()),
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
            options={
                'verbose_name_plural': 'user privacy settings',
            },
        ),
        migrations.CreateModel(
            name='VideoLikersVisibility',
            fields=[
                ('video_id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('likers_public', models.BooleanField()),
            ],
            options={
                'verbose_name_plural': 'video likers visibility overrides',
            },
        ),
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
                'permissions': [('export_video_likers', "Can export a video's likers, with a stated purpose")],
                'indexes': [models.Index(models.F('user_id'), models.F('state'), models.OrderBy(models.F('updated_at'), descending=True), models.OrderBy(models.F('video_id'), descending=True), name='relation_user_list_idx'), models.Index(fields=['video_id', 'user_id'], name='relation_video_idx')],
                'constraints': [models.UniqueConstraint(fields=('user_id', 'video_id'), name='uniq_relation_user_video'), models.CheckConstraint(condition=models.Q(('relation_version__gte', 1)), name='relation_version_positive'), models.CheckConstraint(condition=models.Q(('state__in', ['LIKED', 'UNLIKED'])), name='relation_state_valid')],
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
            options={
                'indexes': [models.Index(fields=['aggregate_key', 'relation_version'], name='outbox_archive_agg_idx')],
            },
        ),
        migrations.CreateModel(
            name='OutboxEvent',
            fields=[
                ('event_id', models.UUIDField(unique=True)),
                ('aggregate_key', models.CharField(max_length=96)),
                ('relation_version', models.BigIntegerField()),
                ('event_type', models.CharField(max_length=48)),
                ('schema_version', models.PositiveSmallIntegerField()),
                ('payload', models.JSONField()),
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('xact_id', models.BigIntegerField()),
                ('status', models.CharField(choices=[('NEW', 'New'), ('PUBLISHING', 'Publishing'), ('RETRY', 'Retry'), ('UNCERTAIN', 'Uncertain'), ('SENT', 'Sent'), ('DEAD', 'Dead')], default='NEW', max_length=12)),
                ('retry_count', models.PositiveIntegerField(default=0)),
                ('next_retry_at', models.DateTimeField()),
                ('claimed_by', models.CharField(blank=True, default='', max_length=64)),
                ('claim_expires_at', models.DateTimeField(null=True)),
                ('last_error', models.CharField(blank=True, default='', max_length=1024)),
                ('stream_key', models.CharField(blank=True, default='', max_length=64)),
                ('stream_entry_id', models.CharField(blank=True, default='', max_length=32)),
                ('stream_partition', models.PositiveIntegerField(null=True)),
                ('stream_entry_ms', models.BigIntegerField(null=True)),
                ('stream_entry_seq', models.BigIntegerField(null=True)),
                ('created_at', models.DateTimeField()),
                ('published_at', models.DateTimeField(null=True)),
            ],
            options={
                'permissions': [('requeue_outbox', 'Can requeue DEAD outbox rows')],
                'indexes': [models.Index(condition=models.Q(('status__in', ['NEW', 'RETRY', 'UNCERTAIN'])), fields=['next_retry_at'], name='outbox_pending_idx'), models.Index(fields=['created_at'], name='outbox_created_idx'), models.Index(fields=['status', 'id'], name='outbox_status_idx'), models.Index(condition=models.Q(('status', 'SENT')), fields=['stream_partition', 'stream_entry_ms'], name='outbox_stream_pos_idx')],
                'constraints': [models.UniqueConstraint(fields=('aggregate_key', 'relation_version', 'event_type'), name='uniq_outbox_aggregate_version')],
            },
        ),
        migrations.CreateModel(
            name='RelationCacheGeneration',
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
                ('baseline_watermark', models.JSONField(default=dict)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'db_table': 'relations_cachegeneration',
                'permissions': [('rebuild_relation_cache', 'Can rebuild the relation cache')],
                'abstract': False,
                'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'ACTIVE')), fields=('status',), name='relations_relationcachegeneration_one_active'), models.UniqueConstraint(models.Value(True), condition=models.Q(('status__in', ('SHADOW', 'BACKFILLING', 'CATCHING_UP', 'VERIFYING'))), name='relations_relationcachegeneration_one_building')],
            },
        ),
        migrations.CreateModel(
            name='RelationShardContract',
            fields=[
                ('version', models.PositiveIntegerField(primary_key=True, serialize=False)),
                ('hash_algorithm', models.CharField(max_length=32)),
                ('hash_seed', models.CharField(max_length=64)),
                ('key_encoding', models.CharField(max_length=32)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('logical_slots', models.PositiveIntegerField()),
                ('is_active', models.BooleanField(default=False)),
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
            name='RelationSlotChange',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('move_id', models.BigIntegerField()),
                ('kind', models.CharField(max_length=3)),
                ('user_id', models.BigIntegerField()),
                ('key', models.CharField(max_length=128)),
            ],
            options={
                'indexes': [models.Index(fields=['move_id', 'id'], name='slotchange_move_idx')],
            },
        ),
        migrations.CreateModel(
            name='RelationSlotMove',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('state', models.CharField(choices=[('AWAITING_APPROVAL', 'Awaiting Approval'), ('PREPARE', 'Prepare'), ('COPYING', 'Copying'), ('CATCHING_UP', 'Catching Up'), ('CUTOVER', 'Cutover'), ('VERIFY', 'Verify'), ('RETIRED', 'Retired'), ('ABORTED', 'Aborted'), ('FAILED', 'Failed')], db_index=True, default='AWAITING_APPROVAL', max_length=20)),
                ('rows_to_copy', models.BigIntegerField(default=0)),
                ('copy_cursor', models.JSONField(blank=True, default=dict)),
                ('copied_rows', models.BigIntegerField(default=0)),
                ('catchup_passes', models.PositiveIntegerField(default=0)),
                ('write_pause_ms', models.FloatField(blank=True, null=True)),
                ('verify_result', models.JSONField(blank=True, default=dict)),
                ('reason', models.TextField()),
                ('requested_by', models.CharField(max_length=150)),
                ('requested_channel', models.CharField(default='cli', max_length=16)),
                ('approved_by', models.CharField(blank=True, default='', max_length=150)),
                ('abort_reason', models.TextField(blank=True, default='')),
                ('error', models.TextField(blank=True, default='')),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('approved_at', models.DateTimeField(blank=True, null=True)),
                ('state_changed_at', models.DateTimeField(blank=True, null=True)),
                ('cutover_at', models.DateTimeField(blank=True, null=True)),
                ('verified_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('source_cleanup_after', models.DateTimeField(blank=True, null=True)),
                ('source_cleaned_at', models.DateTimeField(blank=True, null=True)),
                ('slots', models.JSONField(default=list)),
                ('source_alias', models.CharField(max_length=32)),
                ('target_alias', models.CharField(max_length=32)),
                ('contract_version', models.PositiveIntegerField()),
                ('new_contract_version', models.PositiveIntegerField(blank=True, null=True)),
                ('captured_applied', models.BigIntegerField(default=0)),
            ],
            options={
                'ordering': ['-pk'],
                'permissions': [('plan_relationslotmove', 'Can plan a relation slot move'), ('approve_relationslotmove', 'Can approve, resume or abort a relation slot move')],
                'abstract': False,
                'constraints': [models.CheckConstraint(condition=models.Q(('approved_by', ''), models.Q(('approved_by', models.F('requested_by')), _negated=True), _connector='OR'), name='slot_move_not_approved_by_requester'), models.CheckConstraint(condition=models.Q(('source_alias', models.F('target_alias')), _negated=True), name='slot_move_source_not_target')],
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
                ('service_visibility', models.CharField(choices=[('public', 'Public'), ('friends', 'Friends'), ('private', 'Private')], db_default='public', default='public', max_length=16)),
                ('service_status', models.CharField(choices=[('active', 'Active'), ('taken_down', 'Taken Down'), ('deleted', 'Deleted')], db_default='active', default='active', max_length=16)),
                ('override_visibility', models.CharField(blank=True, choices=[('public', 'Public'), ('friends', 'Friends'), ('private', 'Private')], max_length=16, null=True)),
                ('override_status', models.CharField(blank=True, choices=[('active', 'Active'), ('taken_down', 'Taken Down'), ('deleted', 'Deleted')], max_length=16, null=True)),
                ('override_reason', models.CharField(blank=True, db_default='', default='', max_length=512)),
                ('override_by', models.CharField(blank=True, db_default='', default='', max_length=150)),
                ('override_at', models.DateTimeField(blank=True, null=True)),
                ('revision', models.BigIntegerField(db_default=1, default=1)),
                ('published_at', models.DateTimeField(blank=True, null=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'constraints': [models.CheckConstraint(condition=models.Q(('version__gte', 0)), name='video_version_non_negative'), models.CheckConstraint(condition=models.Q(('revision__gte', 1)), name='video_revision_positive'), models.CheckConstraint(condition=models.Q(('status', django.db.models.functions.comparison.Coalesce('override_status', 'service_status')), ('visibility', django.db.models.functions.comparison.Coalesce('override_visibility', 'service_visibility'))), name='video_effective_is_override_over_service')],
            },
        ),
        # On every relation shard: the contract's slot in SQL, the slot moves' capture trigger, the like command's
        # transaction (relations/sql/, one file a version) and the tombstone sweep's index.
        migrations.RunSQL(sql_file("relations", "likes_slot_of.v1.sql"),
                          "DROP FUNCTION IF EXISTS likes_slot_of(bigint, text, integer)", hints=_SHARD),
        migrations.RunSQL(sql_file("relations", "likes_slot_capture.v1.sql"),
                          "DROP TRIGGER IF EXISTS likes_slot_capture_rel ON relations_likerelation; "
                          "DROP TRIGGER IF EXISTS likes_slot_capture_cmd ON relations_likecommand; "
                          "DROP FUNCTION IF EXISTS likes_slot_capture()", hints=_SHARD),
        migrations.RunSQL(sql_file("relations", "likes_relation_apply.v3.sql"), APPLY_DROP, hints=_SHARD),
        migrations.RunSQL(TOMBSTONE_INDEX, "DROP INDEX IF EXISTS relation_tombstone_age_idx", hints=_SHARD),
    ]
