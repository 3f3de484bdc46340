"""Shared plumbing for management commands: domain errors become clean CLI errors (no tracebacks,
non-zero exit, nothing half-written), and users are resolved by username."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from likes_project.errors import DomainError
from relations.errors import UserNotFound


class DomainCommand(BaseCommand):
    """Subclasses implement `run(*args, **options)`; a DomainError becomes `CommandError`."""

    def add_actor_argument(self, parser):
        parser.add_argument("--actor", help="Operator username to record (must hold the permission).")

    def handle(self, *args, **options):
        try:
            return self.run(*args, **options)
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc

    def run(self, *args, **options):  # pragma: no cover - abstract
        raise NotImplementedError  # every command implements run()


def user_by_username(username: str):
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise UserNotFound(f"No user named {username!r}.")
    return user
