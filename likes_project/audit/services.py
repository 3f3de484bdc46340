"""Audit trail and operator identity for every operational action (OPS, non-negotiable 6).

Every app records its actions through `audit_record`, inside the transaction of the action itself,
so the record and the change commit together. An action that runs inside an ops job is tagged with
the job's id through `job_context`, set by the job runner.
"""

from __future__ import annotations

import contextlib
import contextvars
import getpass
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from likes_project.audit.models import AuditRecord
from likes_project.errors import Forbidden, InvalidInput


@dataclass(frozen=True)
class Actor:
    name: str
    channel: str  # admin | cli | api | system


_current_job: contextvars.ContextVar[int | None] = contextvars.ContextVar("likes_audit_job", default=None)


@contextlib.contextmanager
def job_context(job_id: int | None):
    """Tag every audit record written inside the block with `job_id`."""
    token = _current_job.set(job_id)
    try:
        yield
    finally:
        _current_job.reset(token)


def audit_record(*, actor: Actor, action: str, target_type: str, target_id: str, params: dict,
                 outcome: str = "applied") -> AuditRecord:
    """Append one audit row. Must run inside the caller's transaction on `default`, so the audit row
    and the change it describes commit together."""
    conn = transaction.get_connection("default")
    if not conn.in_atomic_block:
        raise RuntimeError("audit_record must run inside the action's transaction on default")
    return AuditRecord.objects.create(
        actor=actor.name, channel=actor.channel, action=action, target_type=target_type,
        target_id=str(target_id), params=params, outcome=outcome, job_id=_current_job.get(),
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


def api_actor(user_id: int) -> Actor:
    """The audit identity of an end user changing their own settings through the API."""
    return Actor(name=f"user:{user_id}", channel="api")


def system_actor(name: str) -> Actor:
    """A background job of the service itself (a loss detector, a sweeper)."""
    return Actor(name=name, channel="system")
