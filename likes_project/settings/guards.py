"""Start-up guards shared by the settings modules (issue 10 §2).

`refuse_dev_secrets` runs at the end of every settings module: the public development values of
`base` (the secret key, the cursor key derived from it, the video service token) are accepted only
while DEBUG is true. `require_production` names every missing production variable at once.
"""

from __future__ import annotations

import os
import secrets

from django.core.exceptions import ImproperlyConfigured

PRODUCTION_REQUIRED = ("DJANGO_SECRET_KEY", "CURSOR_SIGNING_KEY", "VIDEO_SERVICE_TOKEN", "DJANGO_ALLOWED_HOSTS")


def refuse_dev_secrets(conf: dict) -> None:
    if conf["DEBUG"]:
        return
    public = {conf["DEV_SECRET_KEY"]: "a development key", conf["DEV_VIDEO_SERVICE_TOKEN"]: "the development token"}
    offending = [name for name in ("SECRET_KEY", "CURSOR_SIGNING_KEY", "VIDEO_SERVICE_TOKEN")
                 if conf.get(name) in public]
    if offending:
        raise ImproperlyConfigured(
            f"{', '.join(offending)} hold(s) a public development value while DEBUG is false; set "
            "DJANGO_SECRET_KEY, CURSOR_SIGNING_KEY and VIDEO_SERVICE_TOKEN (or DJANGO_DEBUG=true on a "
            "development machine)."
        )


HELP_FLAGS = {"-h", "--help", "--version"}
HELP_COMMANDS = {"help", "--help", "-h", "--version", "version"}


def is_help_invocation(argv: list[str]) -> bool:
    """`manage.py`, `manage.py help [<cmd>]`, `manage.py <cmd> --help|--version`, `manage.py --version`: these
    build parsers and print text only; they serve nothing and touch no store."""
    if not argv or not os.path.basename(argv[0]).startswith(("manage.py", "django-admin")):
        return False
    return len(argv) == 1 or argv[1] in HELP_COMMANDS or bool(HELP_FLAGS & set(argv[2:]))


def require_production(env, argv: list[str] | None = None) -> None:
    """Refuse to start without the production variables, naming every missing one. A help invocation of
    manage.py (`is_help_invocation`) is let through with random throwaway values for the missing ones
    (known to nobody, gone when it exits), so an operator can read any command's help before the secrets
    are in place."""
    if argv is not None and is_help_invocation(argv):
        for name in PRODUCTION_REQUIRED:
            if not (env.get(name) or "").strip():
                env[name] = "help-only-" + secrets.token_hex(24)
        return
    missing = [name for name in PRODUCTION_REQUIRED if not (env.get(name) or "").strip()]
    if missing:
        raise ImproperlyConfigured(
            f"Production settings refuse to start: missing {', '.join(missing)}. Set each in the environment "
            "(see .env.example); for a development machine use DJANGO_SETTINGS_MODULE=likes_project.settings.dev."
        )
    if env["CURSOR_SIGNING_KEY"].strip() == env["DJANGO_SECRET_KEY"].strip():
        raise ImproperlyConfigured("Production settings refuse to start: CURSOR_SIGNING_KEY must differ from "
                                   "DJANGO_SECRET_KEY (a leaked cursor key must not sign sessions).")
