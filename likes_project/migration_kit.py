"""What several migrations share, written once. Historical migrations import it, so nothing here may
ever change what it returns: a new schema step is a new function."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.db import migrations, models


def sql_file(package: str, name: str) -> str:
    """The text of `<package>/sql/<name>`: the SQL a migration installs (a database function, a trigger), kept
    where a reader finds it (issue 29 §5). A loaded file is never edited: a new version is a new file that a
    new migration loads, so replaying the old migrations still builds what they built (D101)."""
    origin = importlib.util.find_spec(package).origin
    return (Path(origin).parent / "sql" / name).read_text(encoding="utf-8")


def permission_grant_alongside(apps, *, app_label: str, model: str, old_codename: str, codename: str,
                               name: str) -> None:
    """Create the permission `codename` on `app_label.model` and give it to every user and group holding
    `old_codename` on the same model, so a permission that became explicit takes nobody's access away."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    ct, _ = ContentType.objects.get_or_create(app_label=app_label, model=model)
    new, _ = Permission.objects.get_or_create(content_type=ct, codename=codename, defaults={"name": name})
    old = Permission.objects.filter(content_type=ct, codename=old_codename).first()
    if old is None:
        return
    for user in old.user_set.all():
        user.user_permissions.add(new)
    for group in old.group_set.all():
        group.permissions.add(new)


def rebuilding_generations_fail(apps, *, app_label: str, model: str) -> None:
    """A REBUILDING generation at the upgrade to the generation lifecycle was being built by code that
    no longer runs and cannot be resumed: FAILED, so readers stay on the ACTIVE one."""
    from django.utils import timezone

    apps.get_model(app_label, model).objects.filter(status="REBUILDING").update(
        status="FAILED", failure_reason="abandoned: its rebuild was running at the upgrade to the generation lifecycle",
        finished_at=timezone.now())


def reverse_index_tables_v1() -> list:
    """The who-liked reverse index's models as relations 0004 and 0006 created them: the relations
    history creates their tables (on the count partitions, and the generation table on default), and
    counting takes over their state when the models move there."""
    return [
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
    ]


# The lifecycle's columns on a generation model (likes_project.generations.GenerationModel), as they
# were when the three generation models moved onto it.
LIFECYCLE_STATUSES = [("SHADOW", "Shadow"), ("BACKFILLING", "Backfilling"), ("CATCHING_UP", "Catching Up"),
                      ("VERIFYING", "Verifying"), ("ACTIVE", "Active"), ("FAILED", "Failed"), ("RETIRED", "Retired")]
LIFECYCLE_BUILDING = ("SHADOW", "BACKFILLING", "CATCHING_UP", "VERIFYING")


def _lifecycle_fields() -> dict:
    return {
        "status": models.CharField(choices=LIFECYCLE_STATUSES, max_length=12),
        "previous_generation": models.PositiveIntegerField(blank=True, null=True),
        "job_id": models.BigIntegerField(blank=True, null=True),
        "progress": models.JSONField(blank=True, default=dict),
        "fencing_token": models.BigIntegerField(default=0),
        "started_by": models.CharField(blank=True, default="", max_length=150),
        "activated_at": models.DateTimeField(blank=True, null=True),
        "finished_at": models.DateTimeField(blank=True, null=True),
    }


def generation_lifecycle_v1(app_label: str, model_name: str, *, existing: set[str], old_constraints: list[str],
                            permission: tuple[str, str]) -> list:
    """Move one generation model onto the lifecycle: drop its old one-active/one-rebuilding unique
    constraints, add the columns it lacks, bring the ones it has to the lifecycle's definition, add the
    one-ACTIVE and one-building constraints and its explicit rebuild permission."""
    name = model_name.lower()
    ops: list = [migrations.AlterModelOptions(name=name, options={"permissions": [permission]})]
    ops += [migrations.RemoveConstraint(model_name=name, name=c) for c in old_constraints]
    for field, definition in _lifecycle_fields().items():
        op = migrations.AlterField if field in existing else migrations.AddField
        ops.append(op(model_name=name, name=field, field=definition))
    ops += [
        migrations.AddConstraint(model_name=name, constraint=models.UniqueConstraint(
            condition=models.Q(("status", "ACTIVE")), fields=("status",), name=f"{app_label}_{name}_one_active")),
        migrations.AddConstraint(model_name=name, constraint=models.UniqueConstraint(
            models.Value(True), condition=models.Q(("status__in", LIFECYCLE_BUILDING)),
            name=f"{app_label}_{name}_one_building")),
    ]
    return ops


def group_permissions_grant(apps, *, group: str, permissions: list[tuple[str, str, str, str]]) -> None:
    """The group `group` (created if missing) holds every permission of `permissions`, each
    `(app_label, model, codename, name)`: created here if the app's post-migrate step has not made it
    yet (a fresh database), so the role is whole from this migration on."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    role, _ = Group.objects.get_or_create(name=group)
    for app_label, model, codename, name in permissions:
        ct, _ = ContentType.objects.get_or_create(app_label=app_label, model=model)
        perm, _ = Permission.objects.get_or_create(content_type=ct, codename=codename, defaults={"name": name})
        role.permissions.add(perm)


# What a migration that grants permissions to roles depends on (the auth and contenttypes tables it writes).
ROLE_DEPENDENCIES = [("auth", "0012_alter_user_first_name_max_length"), ("contenttypes", "0002_remove_content_type_name")]
CONSOLE_ROLES = ("likes-viewer", "likes-operator", "likes-approver")


def console_roles(view: list, *, operate: list = (), approve: list = ()):
    """The RunPython function of a migration that grants the console's roles new permissions (each
    `(app_label, model, codename, name)`): likes-viewer `view`, likes-operator `view` and `operate`,
    likes-approver `view` and `approve` (a second person approves what an operator requests)."""

    def roles(apps, schema_editor):
        group_permissions_grant(apps, group="likes-viewer", permissions=list(view))
        group_permissions_grant(apps, group="likes-operator", permissions=[*view, *operate])
        group_permissions_grant(apps, group="likes-approver", permissions=[*view, *approve])

    return roles


def pause_switch_fields() -> list:
    """The columns every runtime switch has (`likes_project.switches.PauseSwitch`), before its key."""
    return [
        ("paused", models.BooleanField(default=False)),
        ("reason", models.CharField(blank=True, default="", max_length=256)),
        ("updated_by", models.CharField(blank=True, default="", max_length=150)),
        ("updated_at", models.DateTimeField(auto_now=True)),
    ]
