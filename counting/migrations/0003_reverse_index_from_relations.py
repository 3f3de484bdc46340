# The who-liked reverse index is a projection: its models move from `relations` into `counting`.
# Only Django's state moves (SeparateDatabaseAndState); the tables keep their `relations_` names, so
# no data is copied and existing databases migrate in place. The content types move with them, so
# existing permission grants follow.

from django.db import migrations, models

MOVED = ["reverseindexgeneration", "likereverseprojection", "likereversesort", "reverseeventreceipt",
         "likereverserecent"]


def move_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if ContentType.objects.filter(app_label="counting", model=model).exists():
            continue
        ContentType.objects.filter(app_label="relations", model=model).update(app_label="counting")


def restore_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="counting", model__in=MOVED).update(app_label="relations")


class Migration(migrations.Migration):

    dependencies = [
        ("counting", "0002_countcachegeneration"),
        ("relations", "0006_likereverserecent"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
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
                        'constraints': [models.UniqueConstraint(fields=('generation', 'video_id', 'user_id'), name='uniq_reverse_projection'), models.CheckConstraint(condition=models.Q(models.Q(('liked_at__isnull', False), ('state', 'LIKED')), ('state', 'UNLIKED'), _connector='OR'), name='reverse_projection_liked_has_time')],
                    },
                ),
                migrations.CreateModel(
                    name='LikeReverseSort',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('generation', models.PositiveIntegerField()),
                        ('video_id', models.CharField(max_length=64)),
                        ('reverse_shard', models.PositiveIntegerField()),
                        ('liked_at', models.DateTimeField()),
                        ('user_id', models.BigIntegerField()),
                    ],
                    options={
                        'db_table': 'relations_likereversesort',
                        'constraints': [models.UniqueConstraint(models.F('generation'), models.F('video_id'), models.F('reverse_shard'), models.OrderBy(models.F('liked_at'), descending=True), models.F('user_id'), name='uniq_reverse_sort_key'), models.UniqueConstraint(fields=('generation', 'video_id', 'user_id'), name='uniq_reverse_sort_user')],
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
                        'constraints': [models.UniqueConstraint(fields=('generation', 'source_topic', 'source_partition', 'source_offset'), name='uniq_reverse_receipt_position')],
                    },
                ),
                migrations.CreateModel(
                    name='ReverseIndexGeneration',
                    fields=[
                        ('generation', models.PositiveIntegerField(primary_key=True, serialize=False)),
                        ('status', models.CharField(choices=[('SHADOW', 'Shadow'), ('ACTIVE', 'Active'), ('RETIRED', 'Retired'), ('FAILED', 'Failed')], max_length=8)),
                        ('hash_algorithm', models.CharField(max_length=32)),
                        ('hash_seed', models.CharField(max_length=64)),
                        ('user_id_encoding', models.CharField(max_length=32)),
                        ('shards', models.PositiveIntegerField()),
                        ('placement', models.JSONField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('activated_at', models.DateTimeField(null=True)),
                        ('finished_at', models.DateTimeField(null=True)),
                        ('failure_reason', models.CharField(blank=True, default='', max_length=512)),
                    ],
                    options={
                        'db_table': 'relations_reverseindexgeneration',
                        'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'ACTIVE')), fields=('status',), name='one_active_reverse_gen'), models.UniqueConstraint(condition=models.Q(('status', 'SHADOW')), fields=('status',), name='one_shadow_reverse_gen'), models.CheckConstraint(condition=models.Q(('shards__gt', 0)), name='reverse_gen_shards_positive')],
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
                        'indexes': [models.Index(models.F('generation'), models.F('video_id'), models.OrderBy(models.F('liked_at'), descending=True), models.OrderBy(models.F('user_id'), descending=True), name='reverse_recent_newest')],
                        'constraints': [models.UniqueConstraint(fields=('generation', 'video_id', 'user_id'), name='uniq_reverse_recent_user')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, restore_content_types, hints={"family": "default"}),
    ]
