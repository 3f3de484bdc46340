# The layers issue:
# - `CacheGeneration` is `RelationCacheGeneration` (it covers the relation cache only) and keeps its
#   table; its content type and default permissions follow the new name, so grants are kept;
# - it moves onto the one generation lifecycle (likes_project.generations): new columns and statuses, one
#   ACTIVE and one building generation at most, an explicit rebuild permission given to whoever could
#   change generations; a generation REBUILDING at the upgrade is FAILED (its run cannot be resumed).
# (The reverse index's models left this app's state in 0001_history already; counting holds them.)

from django.db import migrations

from likes_project.migration_kit import (
    generation_lifecycle_v1,
    permission_grant_alongside,
    rebuilding_generations_fail,
)


def rename_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    if ContentType.objects.filter(app_label="relations", model="relationcachegeneration").exists():
        return
    ContentType.objects.filter(app_label="relations", model="cachegeneration").update(model="relationcachegeneration")
    for action in ("add", "change", "delete", "view"):
        Permission.objects.filter(content_type__app_label="relations", codename=f"{action}_cachegeneration").update(
            codename=f"{action}_relationcachegeneration", name=f"Can {action} relation cache generation")


def fail_abandoned_rebuilds(apps, schema_editor):
    rebuilding_generations_fail(apps, app_label="relations", model="RelationCacheGeneration")


def grant_rebuild_permission(apps, schema_editor):
    permission_grant_alongside(apps, app_label="relations", model="relationcachegeneration",
                               old_codename="change_relationcachegeneration", codename="rebuild_relation_cache",
                               name="Can rebuild the relation cache")


class Migration(migrations.Migration):

    dependencies = [
        ("relations", "0001_history"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameModel(old_name="CacheGeneration", new_name="RelationCacheGeneration"),
                migrations.AlterModelTable(name="RelationCacheGeneration", table="relations_cachegeneration"),
            ],
            database_operations=[],
        ),
        migrations.RunPython(rename_content_type, migrations.RunPython.noop, hints={"family": "default"}),
        *generation_lifecycle_v1("relations", "RelationCacheGeneration",
                                 existing={"status", "activated_at", "finished_at"},
                                 old_constraints=["one_active_cache_gen", "one_rebuilding_cache_gen"],
                                 permission=("rebuild_relation_cache", "Can rebuild the relation cache")),
        migrations.RunPython(fail_abandoned_rebuilds, migrations.RunPython.noop, hints={"family": "default"}),
        migrations.RunPython(grant_rebuild_permission, migrations.RunPython.noop, hints={"family": "default"}),
    ]
