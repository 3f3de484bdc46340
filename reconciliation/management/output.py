"""What the reconciliation commands share: `--json` prints one JSON object as the last line of stdout,
also for a refusal ({"code", "message"}), and the exit status says the verdict."""

from __future__ import annotations

import json

from django.core.management.base import CommandError

from likes_project.errors import DomainError


def add_json_argument(parser) -> None:
    parser.add_argument("--json", action="store_true", help="Print one JSON object on the last line of stdout.")


def emit(command, options: dict, payload: dict, text: str) -> None:
    command.stdout.write(json.dumps(payload, sort_keys=True, default=str) if options.get("json") else text)


def refuse(command, options: dict, exc: DomainError, *, returncode: int = 1) -> CommandError:
    """The CommandError for a domain refusal; with --json its envelope is printed first."""
    if options.get("json"):
        command.stdout.write(json.dumps(exc.as_dict(), sort_keys=True, default=str))
    return CommandError(f"{exc.code}: {exc.message}", returncode=returncode)
