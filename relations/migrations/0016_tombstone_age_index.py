# The tombstone sweep's index (issue 31 §4; relations.services.tombstones): UNLIKED relations by state_changed_at,
# so a batch takes the oldest tombstones and `tombstones_oldest` reads one index entry instead of scanning the
# shard (no other index leads with state_changed_at; `relation_user_list_idx` leads with user_id). Partial: the
# LIKED rows, which the sweep never touches, are not in it. Built CONCURRENTLY (commands keep writing).
#
# Plain SQL rather than a Meta index of LikeRelation: the schema (and the upgrade pass, which compares indexes)
# has it all the same; moving it into relations.models.relation later is a SeparateDatabaseAndState.

from django.db import migrations

_SHARD = {"family": "relation_shard"}

INDEX = ("CREATE INDEX CONCURRENTLY IF NOT EXISTS relation_tombstone_age_idx "
         "ON relations_likerelation (state_changed_at, id) WHERE state = 'UNLIKED'")
INDEX_DROP = "DROP INDEX CONCURRENTLY IF EXISTS relation_tombstone_age_idx"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('relations', '0015_version_floor'),
    ]

    operations = [
        migrations.RunSQL(INDEX, INDEX_DROP, hints=_SHARD),
    ]
