"""Runtime pause switches (a consumer's dispatch, a video's display refreshes): one row per key on
`default`, changed only through `pause_switch_set`, which audits every change in its transaction."""

from __future__ import annotations

from django.db import models, transaction

from likes_project.audit.services import Actor, audit_record


class PauseSwitch(models.Model):
    paused = models.BooleanField(default=False)
    reason = models.CharField(max_length=256, blank=True, default="")
    updated_by = models.CharField(max_length=150, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


def pause_switch_set(model: type[PauseSwitch], *, key: str, paused: bool, reason: str, actor: Actor,
                     action_prefix: str, target_type: str) -> PauseSwitch:
    """Pause or resume the switch `key` of `model` (its primary key), audited as
    `<action_prefix>_pause` / `<action_prefix>_resume` (or `.pause` / `.resume` for a prefix ending in a
    dot). Transaction: the switch row and the audit record on `default`."""
    verb = "pause" if paused else "resume"
    action = f"{action_prefix}{verb}" if action_prefix.endswith((".", "_")) else f"{action_prefix}_{verb}"
    with transaction.atomic(using="default", durable=True):
        switch, _ = model.objects.update_or_create(
            pk=key, defaults={"paused": paused, "reason": reason, "updated_by": actor.name})
        audit_record(actor=actor, action=action, target_type=target_type, target_id=key, params={"reason": reason})
    return switch
