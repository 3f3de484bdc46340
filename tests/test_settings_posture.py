"""Production posture of the settings (issue 10 §2): every entry point defaults to production settings,
which refuse to start without their secrets (naming each missing one) and never accept a public
development value; the proxy settings come from the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client, override_settings

from tests.relations.helpers import push_video, service_client

pytestmark = pytest.mark.topology_independent

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = ("DJANGO_SECRET_KEY", "CURSOR_SIGNING_KEY", "VIDEO_SERVICE_TOKEN", "DJANGO_ALLOWED_HOSTS")
SECRETS = {"DJANGO_SECRET_KEY": "s" * 40, "CURSOR_SIGNING_KEY": "c" * 40, "VIDEO_SERVICE_TOKEN": "v" * 40,
           "DJANGO_ALLOWED_HOSTS": "likes.example.com"}


def bare_env(**extra) -> dict:
    """The environment of a fresh deployment: no settings module chosen, none of the secrets."""
    env = {k: v for k, v in os.environ.items()
           if k not in (*REQUIRED, "DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG", "PYTEST_CURRENT_TEST")}
    env.update(extra)
    return env


def run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


SETTINGS_PROBE = ("import json; from django.conf import settings as s; "
                  "print(json.dumps({'module': s.SETTINGS_MODULE, 'debug': s.DEBUG, 'hosts': s.ALLOWED_HOSTS, "
                  "'proxy': s.SECURE_PROXY_SSL_HEADER, 'origins': s.CSRF_TRUSTED_ORIGINS, "
                  "'redirect': s.SECURE_SSL_REDIRECT}))")


@pytest.mark.parametrize("argv", [
    [sys.executable, "manage.py", "check"],
    [sys.executable, "-c", "import likes_project.wsgi"],
    [sys.executable, "-c", "import likes_project.asgi"],
    [sys.executable, "-c", "from likes_project.celery import app; app.loader.import_default_modules()"],
], ids=["manage.py", "wsgi", "asgi", "celery"])
def test_every_entry_point_defaults_to_production_and_names_every_missing_variable(argv):
    done = run(argv, bare_env())
    assert done.returncode != 0
    assert "Production settings refuse to start" in done.stderr
    missing = done.stderr.split("missing ", 1)[1].split(".", 1)[0]
    assert [name.strip() for name in missing.split(",")] == list(REQUIRED)


def test_production_names_only_what_is_missing():
    done = run([sys.executable, "manage.py", "check"], bare_env(**{k: SECRETS[k] for k in REQUIRED[:2]}))
    assert done.returncode != 0 and "missing VIDEO_SERVICE_TOKEN, DJANGO_ALLOWED_HOSTS." in done.stderr


def test_production_starts_with_its_variables_and_reads_the_proxy_settings():
    done = run([sys.executable, "manage.py", "shell", "-c", SETTINGS_PROBE], bare_env(
        **SECRETS, DJANGO_SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto:https",
        CSRF_TRUSTED_ORIGINS="https://likes-admin.example.com, https://other.example.com"))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"module": "likes_project.settings.production", "debug": False, "hosts": ["likes.example.com"],
                    "proxy": ["HTTP_X_FORWARDED_PROTO", "https"],
                    "origins": ["https://likes-admin.example.com", "https://other.example.com"], "redirect": False}


def test_production_refuses_a_cursor_key_equal_to_the_secret_key():
    done = run([sys.executable, "manage.py", "check"], bare_env(**{**SECRETS, "CURSOR_SIGNING_KEY": "s" * 40}))
    assert done.returncode != 0 and "CURSOR_SIGNING_KEY must differ from DJANGO_SECRET_KEY" in done.stderr


@pytest.mark.parametrize(("module", "extra", "named"), [
    ("likes_project.settings.production", {"VIDEO_SERVICE_TOKEN": "dev-video-service-token"}, "VIDEO_SERVICE_TOKEN"),
    ("likes_project.settings.production", {"DJANGO_SECRET_KEY": "dev-only-insecure-key-change-me"}, "SECRET_KEY"),
    ("likes_project.settings.dev", {"DJANGO_DEBUG": "false"}, "SECRET_KEY, CURSOR_SIGNING_KEY, VIDEO_SERVICE_TOKEN"),
], ids=["prod-dev-token", "prod-dev-key", "dev-without-debug"])
def test_the_public_development_values_are_refused_whenever_debug_is_false(module, extra, named):
    env = bare_env(DJANGO_SETTINGS_MODULE=module, **(SECRETS if module.endswith("production") else {}))
    env.update(extra)
    done = run([sys.executable, "manage.py", "shell", "-c", SETTINGS_PROBE], env)
    assert done.returncode != 0
    assert f"{named} hold(s) a public development value while DEBUG is false" in done.stderr


def test_dev_settings_with_debug_serve_on_their_development_defaults():
    done = run([sys.executable, "manage.py", "shell", "-c", SETTINGS_PROBE],
               bare_env(DJANGO_SETTINGS_MODULE="likes_project.settings.dev"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["debug"] is True


@pytest.mark.django_db(databases="__all__")
def test_the_development_video_token_opens_nothing_when_debug_is_false(make_user):
    author = make_user()
    body = {"authorId": author.pk, "visibility": "public", "status": "active", "version": 1}
    with override_settings(VIDEO_SERVICE_TOKEN=settings.DEV_VIDEO_SERVICE_TOKEN, DEBUG=False):
        assert push_video(service_client(settings.DEV_VIDEO_SERVICE_TOKEN), "posture-v1", **body).status_code == 401
    with override_settings(VIDEO_SERVICE_TOKEN=settings.DEV_VIDEO_SERVICE_TOKEN, DEBUG=True):
        assert push_video(service_client(settings.DEV_VIDEO_SERVICE_TOKEN), "posture-v1", **body).status_code == 200


def _admin_login_post(client: Client) -> int:
    client.get("/admin/login/", HTTP_HOST="console.example.com", HTTP_X_FORWARDED_PROTO="https")
    token = client.cookies["csrftoken"].value
    resp = client.post("/admin/login/", {"username": "nobody", "password": "x", "csrfmiddlewaretoken": token},
                       HTTP_HOST="console.example.com", HTTP_ORIGIN="https://console.example.com",
                       HTTP_X_FORWARDED_PROTO="https")
    return resp.status_code


@pytest.mark.django_db(databases="__all__")
@override_settings(ALLOWED_HOSTS=["console.example.com"])
def test_behind_a_tls_proxy_an_admin_post_needs_the_proxy_header_setting():
    # Without SECURE_PROXY_SSL_HEADER the request looks like plain http and its https Origin is refused.
    assert _admin_login_post(Client(enforce_csrf_checks=True)) == 403
    with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
        assert _admin_login_post(Client(enforce_csrf_checks=True)) == 200  # the form again: wrong password


def test_recovery_snapshots_go_to_s3_through_django_storages_when_configured():
    """SNAPSHOT_STORAGE_BACKEND=s3 selects django-storages' S3 backend with the bucket, endpoint and prefix
    from the environment (built here without contacting anything: no S3 is reachable from the tests)."""
    probe = ("import django; django.setup(); from django.core.files.storage import storages; "
             "s = storages['recovery_snapshots']; print(type(s).__module__, getattr(s, 'bucket_name', '-'), "
             "getattr(s, 'endpoint_url', '-'), s.location)")
    env = bare_env(**SECRETS, DJANGO_SETTINGS_MODULE="likes_project.settings.production",
                   SNAPSHOT_STORAGE_BACKEND="s3", SNAPSHOT_S3_BUCKET="likes-snapshots",
                   SNAPSHOT_S3_ENDPOINT_URL="http://127.0.0.1:9", SNAPSHOT_S3_PREFIX="prod/snapshots")
    out = run([sys.executable, "-c", probe], env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["storages.backends.s3", "likes-snapshots", "http://127.0.0.1:9", "prod/snapshots"]
    # Counter-example: by default they go to a local directory.
    del env["SNAPSHOT_STORAGE_BACKEND"]
    out = run([sys.executable, "-c", probe], env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "django.core.files.storage.filesystem"
