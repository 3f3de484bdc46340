"""Audit trail and operator identity for every operational action (OPS, non-negotiable 6)."""

from __future__ import annotations

import getpass
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from likes_project.errors import Forbidden, InvalidInput
from opsconsole.models import AuditRecord


@dataclass(frozen=True)
class Actor:
    name: str
    channel: str  # admin | cli | api | system


SYSTEM_VIDEO_SERVICE = Actor(name="video-service", channel="api")


def audit_record(*, actor: Actor, action: str, target_type: str, target_id: str, params: dict,
                 outcome: str = "applied") -> None:
    """Append one audit row. Must run inside the caller's transaction on `default`, so the audit row
    and the change it describes commit together."""
    conn = transaction.get_connection("default")
    if not conn.in_atomic_block:
        raise RuntimeError("audit_record must run inside the action's transaction on default")
    AuditRecord.objects.create(
        actor=actor.name, channel=actor.channel, action=action, target_type=target_type,
        target_id=str(target_id), params=params, outcome=outcome,
    )


def cli_actor_resolve(*, username: str | None, permission: str) -> Actor:
    """The operator behind a management command. With `--actor`, the named account must be active
    and hold `permission`; without it the OS account running the command (which already has shell
    access to the service) is recorded."""
    if not username:
        return Actor(name=f"os:{getpass.getuser()}", channel="cli")
    user = get_user_model().objects.filter(username=username).first()
    if user is None or not user.is_active:
        raise InvalidInput(f"--actor {username!r} is not an active user.", code="unknown_actor")
    if not user.has_perm(permission):
        raise Forbidden(f"{username!r} lacks the permission {permission}.", code="permission_denied")
    return Actor(name=username, channel="cli")


def admin_actor(user) -> Actor:
    return Actor(name=user.get_username(), channel="admin")
