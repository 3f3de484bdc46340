"""What several migrations share, written once. Historical migrations import it, so nothing here may
ever change what it returns: a new schema step is a new function."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def sql_file(package: str, name: str) -> str:
    """The text of `<package>/sql/<name>`: the SQL a migration installs (a database function, a trigger), kept
    where a reader finds it (issue 29 §5). A loaded file is never edited: a new version is a new file that a
    new migration loads, so replaying the old migrations still builds what they built (D101)."""
    origin = importlib.util.find_spec(package).origin
    return (Path(origin).parent / "sql" / name).read_text(encoding="utf-8")


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


def console_roles(view: list, *, operate: list = (), approve: list = ()):
    """The RunPython function of a migration that grants the console's roles new permissions (each
    `(app_label, model, codename, name)`): likes-viewer `view`, likes-operator `view` and `operate`,
    likes-approver `view` and `approve` (a second person approves what an operator requests)."""

    def roles(apps, schema_editor):
        group_permissions_grant(apps, group="likes-viewer", permissions=list(view))
        group_permissions_grant(apps, group="likes-operator", permissions=[*view, *operate])
        group_permissions_grant(apps, group="likes-approver", permissions=[*view, *approve])

    return roles
