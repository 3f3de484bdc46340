# `counting` 0001_history … 0008_plural_names, squashed (D133): what they leave on a new
# database, written once. A database that applied all of them records this one as applied and runs nothing.

import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models

_COUNT = {"family": "count_partition"}


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('counting', '0001_history'),
        ('counting', '0003_reverse_index_and_lifecycle'),
        ('counting', '0004_video_retirement'),
        ('counting', '0005_likecountprojection_projection_video_idx'),
        ('counting', '0006_recovery_snapshots'),
        ('counting', '0007_bucket_migration'),
        ('counting', '0008_plural_names'),
    ]

    dependencies = [
    ]

    operations = [
        # The partition-local change log's sequence (every count partition has its own; the change_seq triggers
        # below take from it).
        migrations.RunSQL("CREATE SEQUENCE IF NOT EXISTS count_change_seq", "DROP SEQUENCE IF EXISTS count_change_seq",
                          hints=_COUNT),
        migrations.CreateModel(
            name='CountCacheGeneration',
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
                ('projection_generation', models.PositiveIntegerField()),
                ('route_manifest_id', models.BigIntegerField()),
                ('build_from', models.DateTimeField()),
                ('start_checkpoints', models.JSONField(default=dict)),
                ('rows_written', models.BigIntegerField(default=0)),
                ('started_at', models.DateTimeField()),
            ],
            options={
                'permissions': [('rebuild_count_cache', 'Can rebuild the count cache')],
                'abstract': False,
            },
        ),
        migrations.CreateModel(
            name='CountConsumerFence',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('consumer', models.CharField(max_length=64)),
                ('partition', models.PositiveIntegerField()),
                ('fencing_token', models.BigIntegerField()),
            ],
        ),
        migrations.CreateModel(
            name='CountEventReceipt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.PositiveIntegerField()),
                ('source_topic', models.CharField(max_length=64)),
                ('source_partition', models.PositiveIntegerField()),
                ('source_offset', models.CharField(max_length=32)),
                ('event_id', models.CharField(max_length=64)),
                ('outcome', models.CharField(max_length=12)),
                ('created_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='CountGenerationFence',
            fields=[
                ('key', models.CharField(default='active', max_length=16, primary_key=True, serialize=False)),
                ('generation', models.PositiveIntegerField()),
                ('updated_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='CountProjectionGeneration',
            fields=[
                ('generation', models.PositiveIntegerField(primary_key=True, serialize=False)),
                ('bucket_space_version', models.PositiveIntegerField()),
                ('active_manifest_id', models.BigIntegerField(null=True)),
                ('status', models.CharField(choices=[('SHADOW', 'Shadow'), ('ACTIVE', 'Active'), ('RETIRED', 'Retired')], default='SHADOW', max_length=8)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('restored_from_snapshot', models.BigIntegerField(blank=True, null=True)),
                ('scratch', models.BooleanField(default=False)),
                ('activated_at', models.DateTimeField(blank=True, null=True)),
                ('retired_at', models.DateTimeField(blank=True, null=True)),
                ('rows_dropped_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name='CountRefreshSwitch',
            fields=[
                ('reason', models.CharField(blank=True, default='', max_length=256)),
                ('updated_by', models.CharField(blank=True, default='', max_length=150)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('video_id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('paused', models.BooleanField(default=True)),
            ],
            options={
                'verbose_name_plural': 'count refresh switches',
            },
        ),
        migrations.CreateModel(
            name='CountRouteFence',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('bucket_space_version', models.PositiveIntegerField()),
                ('virtual_bucket', models.PositiveIntegerField()),
                ('route_epoch', models.PositiveIntegerField()),
                ('state', models.CharField(choices=[('ACTIVE', 'Active'), ('DRAINING', 'Draining'), ('RETIRED', 'Retired')], default='ACTIVE', max_length=10)),
            ],
        ),
        migrations.CreateModel(
            name='CountRouteManifest',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('bucket_space_version', models.PositiveIntegerField()),
                ('status', models.CharField(choices=[('CANDIDATE', 'Candidate'), ('SEALED', 'Sealed')], default='CANDIDATE', max_length=10)),
                ('row_count', models.PositiveIntegerField(default=0)),
                ('checksum', models.CharField(blank=True, default='', max_length=64)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('sealed_at', models.DateTimeField(null=True)),
            ],
        ),
        migrations.CreateModel(
            name='CountRouteManifestItem',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('virtual_bucket', models.PositiveIntegerField()),
                ('physical_partition', models.CharField(max_length=32)),
                ('route_epoch', models.PositiveIntegerField()),
                ('manifest_id', models.BigIntegerField()),
            ],
        ),
        migrations.CreateModel(
            name='DirtyVideo',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.PositiveIntegerField()),
                ('video_id', models.CharField(max_length=64)),
                ('source_partition', models.PositiveIntegerField()),
                ('dirty_seq', models.BigIntegerField(default=1)),
                ('first_dirty_at', models.DateTimeField()),
                ('last_dirty_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='LikeCountProjection',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.PositiveIntegerField()),
                ('user_id', models.BigIntegerField()),
                ('video_id', models.CharField(max_length=64)),
                ('projected_state', models.CharField(max_length=8)),
                ('projected_version', models.BigIntegerField()),
                ('bucket_space_version', models.PositiveIntegerField()),
                ('virtual_bucket', models.PositiveIntegerField()),
                ('updated_at', models.DateTimeField()),
                ('change_seq', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name='LikeReverseProjection',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.PositiveIntegerField()),
                ('video_id', models.CharField(max_length=64)),
                ('user_id', models.BigIntegerField()),
                ('relation_version', models.BigIntegerField()),
                ('state', models.CharField(choices=[('LIKED', 'Liked'), ('UNLIKED', 'Unliked')], max_length=8)),
                ('liked_at', models.DateTimeField(null=True)),
                ('reverse_shard', models.PositiveIntegerField()),
                ('updated_at', models.DateTimeField()),
            ],
            options={
                'db_table': 'relations_likereverseprojection',
            },
        ),
        migrations.CreateModel(
            name='LikeReverseRecent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.PositiveIntegerField()),
                ('video_id', models.CharField(max_length=64)),
                ('user_id', models.BigIntegerField()),
                ('liked_at', models.DateTimeField()),
            ],
            options={
                'db_table': 'relations_likereverserecent',
            },
        ),
        migrations.CreateModel(
            name='LikeReverseSort',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.PositiveIntegerField()),
                ('video_id', models.CharField(max_length=64)),
                ('user_id', models.BigIntegerField()),
                ('reverse_shard', models.PositiveIntegerField()),
                ('liked_at', models.DateTimeField()),
            ],
            options={
                'db_table': 'relations_likereversesort',
            },
        ),
        migrations.CreateModel(
            name='ReverseEventReceipt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.PositiveIntegerField()),
                ('source_topic', models.CharField(max_length=64)),
                ('source_partition', models.PositiveIntegerField()),
                ('source_offset', models.CharField(max_length=32)),
                ('event_id', models.CharField(max_length=64)),
                ('outcome', models.CharField(max_length=12)),
                ('created_at', models.DateTimeField()),
            ],
            options={
                'db_table': 'relations_reverseeventreceipt',
            },
        ),
        migrations.CreateModel(
            name='ReverseIndexGeneration',
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
                ('hash_algorithm', models.CharField(max_length=32)),
                ('hash_seed', models.CharField(max_length=64)),
                ('user_id_encoding', models.CharField(max_length=32)),
                ('shards', models.PositiveIntegerField()),
                ('placement', models.JSONField()),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'db_table': 'relations_reverseindexgeneration',
                'permissions': [('rebuild_reverse_index', 'Can rebuild the reverse (who liked) index')],
                'abstract': False,
            },
        ),
        migrations.CreateModel(
            name='VideoDisplayCount',
            fields=[
                ('video_id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('generation', models.PositiveIntegerField()),
                ('manifest_id', models.BigIntegerField()),
                ('raw_active_count', models.BigIntegerField()),
                ('risk_hidden_count', models.BigIntegerField(default=0)),
                ('policy_hidden_count', models.BigIntegerField(default=0)),
                ('display_count', models.BigIntegerField()),
                ('snapshot_id', models.BigIntegerField()),
                ('generated_at', models.DateTimeField()),
                ('watermark', models.JSONField(default=dict)),
            ],
        ),
        migrations.CreateModel(
            name='VideoLikeCountVbucket',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.PositiveIntegerField()),
                ('video_id', models.CharField(max_length=64)),
                ('virtual_bucket', models.PositiveIntegerField()),
                ('bucket_space_version', models.PositiveIntegerField()),
                ('active_count', models.BigIntegerField()),
                ('bucket_version', models.BigIntegerField(default=0)),
                ('frozen', models.BooleanField(default=False)),
                ('updated_at', models.DateTimeField()),
                ('change_seq', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name='VideoRetirement',
            fields=[
                ('video_id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('version', models.BigIntegerField()),
                ('deleted_at', models.DateTimeField()),
                ('status', models.CharField(choices=[('PENDING', 'Pending'), ('RETIRED', 'Retired'), ('REVIVED', 'Revived')], default='PENDING', max_length=12)),
                ('fence', models.JSONField(blank=True, null=True)),
                ('reverse_generation', models.PositiveIntegerField(blank=True, null=True)),
                ('retired_at', models.DateTimeField(blank=True, null=True)),
                ('updated_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='VideoRetirementScan',
            fields=[
                ('id', models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ('after_at', models.DateTimeField(blank=True, null=True)),
                ('after_video_id', models.CharField(blank=True, default='', max_length=64)),
                ('scanned_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name='BucketMigration',
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
                ('bucket_space_version', models.PositiveIntegerField()),
                ('generation', models.PositiveIntegerField()),
                ('buckets', models.JSONField(default=list)),
                ('source_partitions', models.JSONField(default=dict)),
                ('source_epochs', models.JSONField(default=dict)),
                ('target_partition', models.CharField(max_length=32)),
                ('source_manifest_id', models.BigIntegerField()),
                ('target_manifest_id', models.BigIntegerField(blank=True, null=True)),
                ('baseline', models.JSONField(blank=True, default=dict)),
                ('replay_next_position', models.JSONField(blank=True, default=dict)),
                ('final_watermark', models.JSONField(blank=True, default=dict)),
                ('cutover_checkpoint_ref', models.JSONField(blank=True, default=dict)),
                ('cutover_stream_offsets', models.JSONField(blank=True, default=dict)),
                ('target_watermark', models.BigIntegerField(blank=True, null=True)),
                ('replayed_events', models.BigIntegerField(default=0)),
            ],
            options={
                'ordering': ['-pk'],
                'permissions': [('plan_bucketmigration', 'Can plan a virtual-bucket migration'), ('approve_bucketmigration', 'Can approve, resume or abort a virtual-bucket migration')],
                'abstract': False,
                'constraints': [models.CheckConstraint(condition=models.Q(('approved_by', ''), models.Q(('approved_by', models.F('requested_by')), _negated=True), _connector='OR'), name='migration_not_approved_by_requester')],
            },
        ),
        migrations.CreateModel(
            name='CountBucketRoute',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('virtual_bucket', models.PositiveIntegerField()),
                ('physical_partition', models.CharField(max_length=32)),
                ('route_epoch', models.PositiveIntegerField()),
                ('bucket_space_version', models.PositiveIntegerField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('bucket_space_version', 'virtual_bucket'), name='uniq_bucket_route')],
            },
        ),
        migrations.CreateModel(
            name='CountBucketSpace',
            fields=[
                ('version', models.PositiveIntegerField(primary_key=True, serialize=False)),
                ('hash_algorithm', models.CharField(max_length=32)),
                ('hash_seed', models.CharField(max_length=64)),
                ('key_encoding', models.CharField(max_length=32)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('virtual_buckets', models.PositiveIntegerField()),
            ],
            options={
                'constraints': [models.CheckConstraint(condition=models.Q(('virtual_buckets__gt', 0)), name='bucket_space_v_positive')],
            },
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='countbucketspace',
            trigger=pgtrigger.compiler.Trigger(name='bucket_space_immutable', sql=pgtrigger.compiler.UpsertTriggerSql(func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;", hash='a0e30cd8c9b33e0b4229597abb15eeceb32a5352', operation='UPDATE OR DELETE', pgid='pgtrigger_bucket_space_immutable_2c5a9', table='counting_countbucketspace', when='BEFORE')),
        ),
        migrations.AddConstraint(
            model_name='countcachegeneration',
            constraint=models.UniqueConstraint(condition=models.Q(('status', 'ACTIVE')), fields=('status',), name='counting_countcachegeneration_one_active'),
        ),
        migrations.AddConstraint(
            model_name='countcachegeneration',
            constraint=models.UniqueConstraint(models.Value(True), condition=models.Q(('status__in', ('SHADOW', 'BACKFILLING', 'CATCHING_UP', 'VERIFYING'))), name='counting_countcachegeneration_one_building'),
        ),
        migrations.AddConstraint(
            model_name='countconsumerfence',
            constraint=models.UniqueConstraint(fields=('consumer', 'partition'), name='uniq_consumer_fence'),
        ),
        migrations.AddIndex(
            model_name='counteventreceipt',
            index=models.Index(fields=['event_id'], name='receipt_event_idx'),
        ),
        migrations.AddConstraint(
            model_name='counteventreceipt',
            constraint=models.UniqueConstraint(fields=('generation', 'source_topic', 'source_partition', 'source_offset'), name='uniq_receipt_position'),
        ),
        migrations.AddConstraint(
            model_name='countprojectiongeneration',
            constraint=models.UniqueConstraint(condition=models.Q(('status', 'ACTIVE')), fields=('status',), name='one_active_count_generation'),
        ),
        migrations.AddConstraint(
            model_name='countroutefence',
            constraint=models.UniqueConstraint(fields=('bucket_space_version', 'virtual_bucket'), name='uniq_route_fence'),
        ),
        migrations.AddConstraint(
            model_name='countroutemanifestitem',
            constraint=models.UniqueConstraint(fields=('manifest_id', 'virtual_bucket'), name='uniq_manifest_bucket'),
        ),
        migrations.AddConstraint(
            model_name='dirtyvideo',
            constraint=models.UniqueConstraint(fields=('generation', 'video_id', 'source_partition'), name='uniq_dirty_video'),
        ),
        migrations.AddIndex(
            model_name='likecountprojection',
            index=models.Index(fields=['generation', 'video_id', 'virtual_bucket'], name='projection_video_idx'),
        ),
        migrations.AddIndex(
            model_name='likecountprojection',
            index=models.Index(fields=['generation', 'virtual_bucket', 'change_seq'], name='projection_change_idx'),
        ),
        migrations.AddConstraint(
            model_name='likecountprojection',
            constraint=models.UniqueConstraint(fields=('generation', 'user_id', 'video_id'), name='uniq_count_projection'),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='likecountprojection',
            trigger=pgtrigger.compiler.Trigger(name='projection_change_seq', sql=pgtrigger.compiler.UpsertTriggerSql(func="NEW.change_seq := nextval('count_change_seq'); RETURN NEW;", hash='4cc4203d8b8e6bec5972f6ae2bce08a167558468', operation='INSERT OR UPDATE', pgid='pgtrigger_projection_change_seq_05402', table='counting_likecountprojection', when='BEFORE')),
        ),
        migrations.AddConstraint(
            model_name='likereverseprojection',
            constraint=models.UniqueConstraint(fields=('generation', 'video_id', 'user_id'), name='uniq_reverse_projection'),
        ),
        migrations.AddConstraint(
            model_name='likereverseprojection',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('liked_at__isnull', False), ('state', 'LIKED')), ('state', 'UNLIKED'), _connector='OR'), name='reverse_projection_liked_has_time'),
        ),
        migrations.AddIndex(
            model_name='likereverserecent',
            index=models.Index(models.F('generation'), models.F('video_id'), models.OrderBy(models.F('liked_at'), descending=True), models.OrderBy(models.F('user_id'), descending=True), name='reverse_recent_newest'),
        ),
        migrations.AddConstraint(
            model_name='likereverserecent',
            constraint=models.UniqueConstraint(fields=('generation', 'video_id', 'user_id'), name='uniq_reverse_recent_user'),
        ),
        migrations.AddConstraint(
            model_name='likereversesort',
            constraint=models.UniqueConstraint(models.F('generation'), models.F('video_id'), models.F('reverse_shard'), models.OrderBy(models.F('liked_at'), descending=True), models.F('user_id'), name='uniq_reverse_sort_key'),
        ),
        migrations.AddConstraint(
            model_name='likereversesort',
            constraint=models.UniqueConstraint(fields=('generation', 'video_id', 'user_id'), name='uniq_reverse_sort_user'),
        ),
        migrations.AddConstraint(
            model_name='reverseeventreceipt',
            constraint=models.UniqueConstraint(fields=('generation', 'source_topic', 'source_partition', 'source_offset'), name='uniq_reverse_receipt_position'),
        ),
        migrations.AddConstraint(
            model_name='reverseindexgeneration',
            constraint=models.UniqueConstraint(condition=models.Q(('status', 'ACTIVE')), fields=('status',), name='counting_reverseindexgeneration_one_active'),
        ),
        migrations.AddConstraint(
            model_name='reverseindexgeneration',
            constraint=models.UniqueConstraint(models.Value(True), condition=models.Q(('status__in', ('SHADOW', 'BACKFILLING', 'CATCHING_UP', 'VERIFYING'))), name='counting_reverseindexgeneration_one_building'),
        ),
        migrations.AddConstraint(
            model_name='reverseindexgeneration',
            constraint=models.CheckConstraint(condition=models.Q(('shards__gt', 0)), name='reverse_gen_shards_positive'),
        ),
        migrations.AddIndex(
            model_name='videolikecountvbucket',
            index=models.Index(fields=['generation', 'virtual_bucket', 'change_seq'], name='vbucket_change_idx'),
        ),
        migrations.AddConstraint(
            model_name='videolikecountvbucket',
            constraint=models.UniqueConstraint(fields=('generation', 'video_id', 'virtual_bucket'), name='uniq_vbucket'),
        ),
        migrations.AddConstraint(
            model_name='videolikecountvbucket',
            constraint=models.CheckConstraint(condition=models.Q(('active_count__gte', 0)), name='vbucket_active_count_non_negative'),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name='videolikecountvbucket',
            trigger=pgtrigger.compiler.Trigger(name='vbucket_change_seq', sql=pgtrigger.compiler.UpsertTriggerSql(func="NEW.change_seq := nextval('count_change_seq'); RETURN NEW;", hash='3340b047150ba5dae9bc90544ad4b7ecb0e7f001', operation='INSERT OR UPDATE', pgid='pgtrigger_vbucket_change_seq_c6a20', table='counting_videolikecountvbucket', when='BEFORE')),
        ),
        migrations.AddIndex(
            model_name='videoretirement',
            index=models.Index(condition=models.Q(('status', 'PENDING')), fields=['deleted_at', 'video_id'], name='retire_pending_idx'),
        ),
        migrations.AddIndex(
            model_name='videoretirement',
            index=models.Index(condition=models.Q(('status', 'RETIRED')), fields=['reverse_generation', 'video_id'], name='retire_retired_gen_idx'),
        ),
        migrations.AddConstraint(
            model_name='videoretirementscan',
            constraint=models.CheckConstraint(condition=models.Q(('id', 1)), name='retire_scan_singleton'),
        ),
    ]
