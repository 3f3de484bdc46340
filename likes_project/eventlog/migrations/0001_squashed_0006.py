# `eventlog` 0001_initial … 0006_plural_names, squashed (D133): what they leave on a new
# database, written once. A database that applied all of them records this one as applied and runs nothing.

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('eventlog', '0001_initial'),
        ('eventlog', '0002_retry_redrive_lost_tail'),
        ('eventlog', '0003_gauge_snapshot'),
        ('eventlog', '0004_console_roles_view_checkpoints'),
        ('eventlog', '0005_consumer_partition_switch'),
        ('eventlog', '0006_plural_names'),
    ]

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='ConsumerSwitch',
            fields=[
                ('paused', models.BooleanField(default=False)),
                ('reason', models.CharField(blank=True, default='', max_length=256)),
                ('updated_by', models.CharField(blank=True, default='', max_length=150)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('consumer', models.CharField(max_length=64, primary_key=True, serialize=False)),
            ],
            options={
                'verbose_name_plural': 'consumer switches',
            },
        ),
        migrations.CreateModel(
            name='GaugeSnapshot',
            fields=[
                ('key', models.CharField(max_length=32, primary_key=True, serialize=False)),
                ('computed_at', models.DateTimeField()),
                ('duration_s', models.FloatField(default=0.0)),
                ('families', models.JSONField(default=list)),
                ('errors', models.JSONField(default=list)),
            ],
        ),
        migrations.CreateModel(
            name='Lease',
            fields=[
                ('resource', models.CharField(max_length=128, primary_key=True, serialize=False)),
                ('holder', models.CharField(max_length=128)),
                ('fencing_token', models.BigIntegerField(default=0)),
                ('expires_at', models.DateTimeField()),
                ('acquired_at', models.DateTimeField()),
                ('renewed_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='ConsumerCheckpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('consumer', models.CharField(max_length=64)),
                ('partition', models.PositiveIntegerField()),
                ('last_done_id', models.CharField(default='0-0', max_length=32)),
                ('fencing_token', models.BigIntegerField(default=0)),
                ('blocked_entry_id', models.CharField(blank=True, default='', max_length=32)),
                ('blocked_attempts', models.PositiveIntegerField(default=0)),
                ('blocked_reason', models.CharField(blank=True, default='', max_length=64)),
                ('blocked_error', models.CharField(blank=True, default='', max_length=512)),
                ('blocked_since', models.DateTimeField(blank=True, null=True)),
                ('retry_at', models.DateTimeField(blank=True, null=True)),
                ('applied_total', models.BigIntegerField(default=0)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('consumer', 'partition'), name='uniq_consumer_partition')],
            },
        ),
        migrations.CreateModel(
            name='ConsumerPartitionSwitch',
            fields=[
                ('paused', models.BooleanField(default=False)),
                ('reason', models.CharField(blank=True, default='', max_length=256)),
                ('updated_by', models.CharField(blank=True, default='', max_length=150)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('key', models.CharField(max_length=80, primary_key=True, serialize=False)),
                ('consumer', models.CharField(max_length=64)),
                ('partition', models.PositiveIntegerField()),
            ],
            options={
                'verbose_name': 'consumer partition switch',
                'verbose_name_plural': 'consumer partition switches',
                'constraints': [models.UniqueConstraint(fields=('consumer', 'partition'), name='uniq_consumer_partition_switch')],
            },
        ),
        migrations.CreateModel(
            name='DeadLetter',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('consumer', models.CharField(max_length=64)),
                ('stream_key', models.CharField(max_length=64)),
                ('entry_id', models.CharField(max_length=32)),
                ('event_id', models.CharField(blank=True, default='', max_length=64)),
                ('video_id', models.CharField(blank=True, db_index=True, default='', max_length=64)),
                ('user_id', models.BigIntegerField(db_index=True, null=True)),
                ('payload', models.JSONField(default=dict)),
                ('error_class', models.CharField(max_length=128)),
                ('error', models.TextField(blank=True, default='')),
                ('attempts', models.PositiveIntegerField(default=1)),
                ('first_failed_at', models.DateTimeField()),
                ('last_failed_at', models.DateTimeField()),
                ('status', models.CharField(choices=[('NEW', 'New'), ('REQUEUED', 'Requeued'), ('DISCARDED', 'Discarded'), ('RESOLVED', 'Resolved')], default='NEW', max_length=12)),
                ('resolver', models.CharField(blank=True, default='', max_length=150)),
                ('reason', models.CharField(blank=True, default='', max_length=512)),
                ('resolved_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'permissions': [('requeue_deadletter', 'Can requeue dead letters'), ('discard_deadletter', 'Can discard dead letters')],
                'indexes': [models.Index(fields=['status', 'first_failed_at'], name='dead_letter_status_idx')],
                'constraints': [models.UniqueConstraint(fields=('consumer', 'stream_key', 'entry_id'), name='uniq_dead_letter_entry')],
            },
        ),
        migrations.CreateModel(
            name='LostTailWatermark',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('shard', models.CharField(max_length=64)),
                ('partition', models.PositiveIntegerField()),
                ('checked_above', models.CharField(default='0-0', max_length=32)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('shard', 'partition'), name='uniq_lost_tail_watermark')],
            },
        ),
        migrations.CreateModel(
            name='StreamContract',
            fields=[
                ('version', models.PositiveIntegerField(primary_key=True, serialize=False)),
                ('hash_algorithm', models.CharField(max_length=32)),
                ('hash_seed', models.CharField(max_length=64)),
                ('key_encoding', models.CharField(max_length=32)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('topic', models.CharField(max_length=64)),
                ('partitions', models.PositiveIntegerField()),
                ('is_active', models.BooleanField(default=False)),
            ],
            options={
                'constraints': [models.UniqueConstraint(condition=models.Q(('is_active', True)), fields=('is_active',), name='one_active_stream_contract'), models.CheckConstraint(condition=models.Q(('partitions__gt', 0)), name='stream_partitions_positive')],
            },
        ),
    ]
