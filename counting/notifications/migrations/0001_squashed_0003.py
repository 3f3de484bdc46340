# `notifications` 0001_initial … 0003_erasure_retention_indexes, squashed (D133): what they leave on a new
# database, written once. A database that applied all of them records this one as applied and runs nothing.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ('notifications', '0001_initial'),
        ('notifications', '0002_roles'),
        ('notifications', '0003_erasure_retention_indexes'),
    ]

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='NotifyRelation',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('author_id', models.BigIntegerField()),
                ('video_id', models.CharField(max_length=64)),
                ('user_id', models.BigIntegerField()),
                ('relation_version', models.BigIntegerField(default=0)),
                ('state', models.CharField(default='UNLIKED', max_length=8)),
                ('window_start', models.DateTimeField(blank=True, null=True)),
                ('window_end', models.DateTimeField(blank=True, null=True)),
                ('updated_at', models.DateTimeField()),
            ],
            options={
                'indexes': [models.Index(fields=['user_id'], name='notify_relation_user_idx'), models.Index(fields=['updated_at'], name='notify_relation_updated_idx')],
                'constraints': [models.UniqueConstraint(fields=('author_id', 'video_id', 'user_id'), name='uniq_notify_relation')],
            },
        ),
        migrations.CreateModel(
            name='NotifyWindow',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('author_id', models.BigIntegerField()),
                ('video_id', models.CharField(max_length=64)),
                ('window_start', models.DateTimeField()),
                ('window_end', models.DateTimeField()),
                ('new_likes', models.IntegerField(default=0)),
                ('last_added_at', models.DateTimeField(blank=True, null=True)),
                ('read_at', models.DateTimeField(blank=True, null=True)),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
            ],
            options={
                'indexes': [models.Index(fields=['author_id', '-window_end', '-id'], name='notify_window_list_idx'), models.Index(fields=['window_start'], name='notify_window_start_idx')],
                'constraints': [models.UniqueConstraint(fields=('author_id', 'video_id', 'window_start'), name='uniq_notify_window')],
            },
        ),
        migrations.CreateModel(
            name='NotifyWindowLiker',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('user_id', models.BigIntegerField()),
                ('liked_at', models.DateTimeField()),
                ('window', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='likers', to='notifications.notifywindow')),
            ],
            options={
                'indexes': [models.Index(fields=['window', '-liked_at', '-user_id'], name='notify_liker_recent_idx'), models.Index(fields=['user_id'], name='notify_liker_user_idx')],
                'constraints': [models.UniqueConstraint(fields=('window', 'user_id'), name='uniq_notify_window_liker')],
            },
        ),
    ]
