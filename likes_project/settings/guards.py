"""Start-up guards shared by the settings modules (issue 10 §2).

`refuse_dev_secrets` runs at the end of every settings module: the public development values of
`base` (the secret key, the cursor key derived from it, the video service token) are accepted only
while DEBUG is true. `require_production` names every missing production variable at once.
"""

from __future__ import annotations

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


def require_production(env) -> None:
    missing = [name for name in PRODUCTION_REQUIRED if not (env.get(name) or "").strip()]
    if missing:
        raise ImproperlyConfigured(
            f"Production settings refuse to start: missing {', '.join(missing)}. Set each in the environment "
            "(see .env.example); for a development machine use DJANGO_SETTINGS_MODULE=likes_project.settings.dev."
        )
    if env["CURSOR_SIGNING_KEY"].strip() == env["DJANGO_SECRET_KEY"].strip():
        raise ImproperlyConfigured("Production settings refuse to start: CURSOR_SIGNING_KEY must differ from "
                                   "DJANGO_SECRET_KEY (a leaked cursor key must not sign sessions).")
