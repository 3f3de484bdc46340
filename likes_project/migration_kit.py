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
    wanted = {(app_label, model, codename): name for app_label, model, codename, name in permissions}
    # Set-based: what exists is read in two queries, only what is missing is created one by one (a role's
    # whole list is granted again by the test helpers after every flush, and by each migration that adds to it).
    types = {(ct.app_label, ct.model): ct
             for ct in ContentType.objects.filter(app_label__in={a for a, _m, _c in wanted})}
    for key in sorted({(a, m) for a, m, _c in wanted} - types.keys()):
        types[key], _ = ContentType.objects.get_or_create(app_label=key[0], model=key[1])
    existing = {(p.content_type_id, p.codename): p.pk for p in Permission.objects.filter(
        content_type__in=list(types.values()), codename__in={c for _a, _m, c in wanted})}
    ids = []
    for (app_label, model, codename), name in wanted.items():
        ct = types[(app_label, model)]
        pk = existing.get((ct.pk, codename))
        if pk is None:
            pk = Permission.objects.get_or_create(content_type=ct, codename=codename, defaults={"name": name})[0].pk
        ids.append(pk)
    role.permissions.add(*ids)  # one read of what the role holds, one insert of the rest


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
