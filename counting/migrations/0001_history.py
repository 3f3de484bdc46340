# The counting app's history up to 0002 (applied on every database created before the layers issue),
# squashed: a fresh database applies this; an existing one has its replaced migrations recorded.

from django.db import migrations, models


class Migration(migrations.Migration):

    replaces = [('counting', '0001_initial'), ('counting', '0002_countcachegeneration')]

    initial = True

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='CountRefreshSwitch',
            fields=[
                ('video_id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('paused', models.BooleanField(default=True)),
                ('reason', models.CharField(blank=True, default='', max_length=256)),
                ('updated_by', models.CharField(blank=True, default='', max_length=150)),
                ('updated_at', models.DateTimeField(auto_now=True)),
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
            name='CountBucketRoute',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('bucket_space_version', models.PositiveIntegerField()),
                ('virtual_bucket', models.PositiveIntegerField()),
                ('physical_partition', models.CharField(max_length=32)),
                ('route_epoch', models.PositiveIntegerField()),
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
                ('virtual_buckets', models.PositiveIntegerField()),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'constraints': [models.CheckConstraint(condition=models.Q(('virtual_buckets__gt', 0)), name='bucket_space_v_positive')],
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
            options={
                'constraints': [models.UniqueConstraint(fields=('consumer', 'partition'), name='uniq_consumer_fence')],
            },
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
            options={
                'indexes': [models.Index(fields=['event_id'], name='receipt_event_idx')],
                'constraints': [models.UniqueConstraint(fields=('generation', 'source_topic', 'source_partition', 'source_offset'), name='uniq_receipt_position')],
            },
        ),
        migrations.CreateModel(
            name='CountProjectionGeneration',
            fields=[
                ('generation', models.PositiveIntegerField(primary_key=True, serialize=False)),
                ('bucket_space_version', models.PositiveIntegerField()),
                ('active_manifest_id', models.BigIntegerField(null=True)),
                ('status', models.CharField(choices=[('SHADOW', 'Shadow'), ('ACTIVE', 'Active'), ('RETIRED', 'Retired')], default='SHADOW', max_length=8)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'ACTIVE')), fields=('status',), name='one_active_count_generation')],
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
            options={
                'constraints': [models.UniqueConstraint(fields=('bucket_space_version', 'virtual_bucket'), name='uniq_route_fence')],
            },
        ),
        migrations.CreateModel(
            name='CountRouteManifestItem',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('manifest_id', models.BigIntegerField()),
                ('virtual_bucket', models.PositiveIntegerField()),
                ('physical_partition', models.CharField(max_length=32)),
                ('route_epoch', models.PositiveIntegerField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('manifest_id', 'virtual_bucket'), name='uniq_manifest_bucket')],
            },
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
            options={
                'constraints': [models.UniqueConstraint(fields=('generation', 'video_id', 'source_partition'), name='uniq_dirty_video')],
            },
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
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('generation', 'user_id', 'video_id'), name='uniq_count_projection')],
            },
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
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('generation', 'video_id', 'virtual_bucket'), name='uniq_vbucket'), models.CheckConstraint(condition=models.Q(('active_count__gte', 0)), name='vbucket_active_count_non_negative')],
            },
        ),
        migrations.CreateModel(
            name='CountCacheGeneration',
            fields=[
                ('generation', models.PositiveIntegerField(primary_key=True, serialize=False)),
                ('status', models.CharField(choices=[('REBUILDING', 'Rebuilding'), ('ACTIVE', 'Active'), ('FAILED', 'Failed'), ('RETIRED', 'Retired')], max_length=10)),
                ('projection_generation', models.PositiveIntegerField()),
                ('route_manifest_id', models.BigIntegerField()),
                ('previous_generation', models.PositiveIntegerField(null=True)),
                ('build_from', models.DateTimeField()),
                ('start_checkpoints', models.JSONField(default=dict)),
                ('rows_written', models.BigIntegerField(default=0)),
                ('started_by', models.CharField(blank=True, default='', max_length=150)),
                ('failure_reason', models.CharField(blank=True, default='', max_length=512)),
                ('started_at', models.DateTimeField()),
                ('activated_at', models.DateTimeField(null=True)),
                ('finished_at', models.DateTimeField(null=True)),
            ],
            options={
                'permissions': [('rebuild_count_cache', 'Can rebuild the count cache')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'ACTIVE')), fields=('status',), name='one_active_count_cache_generation'), models.UniqueConstraint(condition=models.Q(('status', 'REBUILDING')), fields=('status',), name='one_rebuilding_count_cache_generation')],
            },
        ),
    ]
