# Two state-only changes; no table is created, dropped or renamed:
# - the reverse index models now belong to `counting` (counting 0003 took over their state);
# - `CacheGeneration` is `RelationCacheGeneration` (it covers the relation cache only) and keeps its
#   table. Its content type is renamed too, so existing permission grants are kept.

from django.db import migrations


def rename_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    if ContentType.objects.filter(app_label="relations", model="relationcachegeneration").exists():
        return
    ContentType.objects.filter(app_label="relations", model="cachegeneration").update(model="relationcachegeneration")
    # The default permissions follow the model's new name (grants are kept: same rows, new codenames).
    for action in ("add", "change", "delete", "view"):
        Permission.objects.filter(content_type__app_label="relations", codename=f"{action}_cachegeneration").update(
            codename=f"{action}_relationcachegeneration", name=f"Can {action} relation cache generation")


def restore_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="relations", model="relationcachegeneration").update(model="cachegeneration")


class Migration(migrations.Migration):

    dependencies = [
        ("relations", "0006_likereverserecent"),
        ("counting", "0003_reverse_index_from_relations"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="LikeReverseProjection"),
                migrations.DeleteModel(name="LikeReverseSort"),
                migrations.DeleteModel(name="ReverseEventReceipt"),
                migrations.DeleteModel(name="ReverseIndexGeneration"),
                migrations.DeleteModel(name="LikeReverseRecent"),
                migrations.RenameModel(old_name="CacheGeneration", new_name="RelationCacheGeneration"),
                migrations.AlterModelTable(name="RelationCacheGeneration", table="relations_cachegeneration"),
            ],
            database_operations=[],
        ),
        migrations.RunPython(rename_content_type, restore_content_type, hints={"family": "default"}),
    ]
