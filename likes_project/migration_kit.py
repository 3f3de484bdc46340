"""Helpers the data steps of migrations share. Kept stable: historical migrations import them."""

from __future__ import annotations


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
