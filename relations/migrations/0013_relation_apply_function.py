# The like command's transaction in one round trip (issue 15 §1, D84): a PL/pgSQL function on every
# relation shard doing what `relations.services.commands._apply_python` does statement by statement:
# the command lookup, the write barrier's shared locks, the relation lock and CAS (or first insert),
# the outbox row and the command record. `_apply_python` stays the readable reference; the hypothesis
# test in tests/relations/test_command_paths.py checks the two give the same rows and verdicts.
#
# Outcomes (column `outcome`):
#   replayed  the operation id is already recorded: its verdict, and the relation now; nothing written
#   barrier   a write barrier holds the shard or the video: nothing written, the caller polls (REC-5)
#   stale     baseVersion is not the current version (policy reject): nothing written, the relation now
#   applied   the verdict of this command (changed or not), everything written
# A concurrent transaction that committed the same operation id first makes the function raise SQLSTATE
# LK409 after its writes, so the whole statement (its transaction) rolls back and the caller replays.
# Every name a caller decides (lock namespaces, event type, aggregate key, shard alias) is a parameter:
# the Python modules that own them stay their one source.

from django.db import migrations

from likes_project.migration_kit import sql_file

_SHARD = {"family": "relation_shard"}

FUNCTION = sql_file("relations", "likes_relation_apply.v1.sql")

REVERSE = "DROP FUNCTION IF EXISTS likes_relation_apply(bigint, text, text, text, bigint, text, bigint, " \
          "timestamptz, text, uuid, text, text, integer, boolean, boolean, integer, integer)"


class Migration(migrations.Migration):

    dependencies = [
        ("relations", "0012_likers_export_permission"),
    ]

    operations = [
        migrations.RunSQL(FUNCTION, REVERSE, hints=_SHARD),
    ]
