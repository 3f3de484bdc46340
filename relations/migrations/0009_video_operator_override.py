"""Operator overrides of a video are stored apart from the video service's snapshot (decision D50).

The existing `visibility` / `status` become the effective values; what a row holds today is taken as
the service's snapshot (an earlier admin edit cannot be told apart from a push), with no override, and
its cache revision starts at its version so cached entries stay ordered."""

import django.db.models.functions.comparison
from django.db import migrations, models

VISIBILITY = [('public', 'Public'), ('friends', 'Friends'), ('private', 'Private')]
STATUS = [('active', 'Active'), ('taken_down', 'Taken Down'), ('deleted', 'Deleted')]


class Migration(migrations.Migration):

    dependencies = [
        ('relations', '0008_outbox_requeue_permission'),
    ]

    operations = [
        migrations.AddField(
            model_name='videosnapshot',
            name='service_visibility',
            field=models.CharField(choices=VISIBILITY, db_default='public', default='public', max_length=16),
        ),
        migrations.AddField(
            model_name='videosnapshot',
            name='service_status',
            field=models.CharField(choices=STATUS, db_default='active', default='active', max_length=16),
        ),
        migrations.AddField(
            model_name='videosnapshot',
            name='override_visibility',
            field=models.CharField(blank=True, choices=VISIBILITY, max_length=16, null=True),
        ),
        migrations.AddField(
            model_name='videosnapshot',
            name='override_status',
            field=models.CharField(blank=True, choices=STATUS, max_length=16, null=True),
        ),
        migrations.AddField(
            model_name='videosnapshot',
            name='override_reason',
            field=models.CharField(blank=True, db_default='', default='', max_length=512),
        ),
        migrations.AddField(
            model_name='videosnapshot',
            name='override_by',
            field=models.CharField(blank=True, db_default='', default='', max_length=150),
        ),
        migrations.AddField(
            model_name='videosnapshot',
            name='override_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='videosnapshot',
            name='revision',
            field=models.BigIntegerField(db_default=1, default=1),
        ),
        migrations.RunSQL(
            "UPDATE relations_videosnapshot SET service_visibility = visibility, service_status = status, "
            "revision = GREATEST(version, 1)",
            migrations.RunSQL.noop,
            hints={"family": "default"},
        ),
        migrations.AddConstraint(
            model_name='videosnapshot',
            constraint=models.CheckConstraint(condition=models.Q(('revision__gte', 1)), name='video_revision_positive'),
        ),
        migrations.AddConstraint(
            model_name='videosnapshot',
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ('status', django.db.models.functions.comparison.Coalesce('override_status', 'service_status')),
                    ('visibility', django.db.models.functions.comparison.Coalesce('override_visibility',
                                                                                  'service_visibility'))),
                name='video_effective_is_override_over_service'),
        ),
    ]
