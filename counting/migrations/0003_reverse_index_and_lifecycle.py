# The layers issue:
# - the who-liked reverse index is a projection: its models move here from `relations`. Only Django's
#   state moves; the tables keep their `relations_` names (no data is copied), and their content types
#   move too, so permission grants follow;
# - the count cache's and the reverse index's generations move onto the one generation lifecycle
#   (likes_project.generations); a count-cache generation REBUILDING at the upgrade is FAILED;
# - the beat entries of the tasks that moved from `relations.` to `counting.` names are dropped (the
#   scheduler syncs the new ones from the settings).

from django.db import migrations

from likes_project.migration_kit import (
    generation_lifecycle_v1,
    permission_grant_alongside,
    rebuilding_generations_fail,
    reverse_index_tables_v1,
)

MOVED = ["reverseindexgeneration", "likereverseprojection", "likereversesort", "reverseeventreceipt",
         "likereverserecent"]


def move_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if not ContentType.objects.filter(app_label="counting", model=model).exists():
            ContentType.objects.filter(app_label="relations", model=model).update(app_label="counting")


def fail_abandoned_rebuilds(apps, schema_editor):
    rebuilding_generations_fail(apps, app_label="counting", model="CountCacheGeneration")


def grant_rebuild_permission(apps, schema_editor):
    permission_grant_alongside(apps, app_label="counting", model="reverseindexgeneration",
                               old_codename="change_reverseindexgeneration", codename="rebuild_reverse_index",
                               name="Can rebuild the reverse (who liked) index")


def drop_renamed_beat_entries(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(task__in=["relations.project_reverse_all", "relations.retire_deleted_videos"]).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("counting", "0001_history"),
        ("relations", "0001_history"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=reverse_index_tables_v1(), database_operations=[]),
        migrations.RunPython(move_content_types, migrations.RunPython.noop, hints={"family": "default"}),
        *generation_lifecycle_v1("counting", "CountCacheGeneration",
                                 existing={"status", "activated_at", "finished_at", "previous_generation", "started_by"},
                                 old_constraints=["one_active_count_cache_generation",
                                                  "one_rebuilding_count_cache_generation"],
                                 permission=("rebuild_count_cache", "Can rebuild the count cache")),
        *generation_lifecycle_v1("counting", "ReverseIndexGeneration",
                                 existing={"status", "activated_at", "finished_at"},
                                 old_constraints=["one_active_reverse_gen", "one_shadow_reverse_gen"],
                                 permission=("rebuild_reverse_index", "Can rebuild the reverse (who liked) index")),
        migrations.RunPython(fail_abandoned_rebuilds, migrations.RunPython.noop, hints={"family": "default"}),
        migrations.RunPython(grant_rebuild_permission, migrations.RunPython.noop, hints={"family": "default"}),
        migrations.RunPython(drop_renamed_beat_entries, migrations.RunPython.noop, hints={"family": "default"}),
    ]
