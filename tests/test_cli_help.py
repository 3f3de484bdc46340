"""Every management command of this project builds its parser the way an operator runs it (issue 10
§6a): `manage.py help <command>` in a subprocess, with the test settings and this run's stores, must exit
0 and print the usage; and `manage.py upsert_video --version` is Django's own flag again (it prints
Django's version, not an error about a missing argument). tests/test_commands.py builds the same
parsers in-process; a subprocess also catches what only a fresh interpreter shows (an import that
fails at start-up, a command module that touches a store while loading, a settings module that refuses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import django
import pytest

from tests.drills import service_env
from tests.test_commands import OWN
from tests.test_settings_posture import bare_env  # an operator's shell before the secrets are set

pytestmark = pytest.mark.topology_independent

ROOT = Path(__file__).resolve().parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON if VENV_PYTHON.exists() else sys.executable)
NAMES = [name for name, _app in OWN]


def manage(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "manage.py", *argv], cwd=ROOT, env=env or service_env(), capture_output=True,
                          text=True, timeout=180)


# One fresh interpreter prints every command's help the way `manage.py help NAME` does: argv names `manage.py
# help` while the settings load (production ones, no secrets), and each command module is first imported
# inside its own `help` (an import that fails, or a module that touches a store while loading, still shows).
# One interpreter instead of one per command: the start-up cost was most of this module's minute.
PROBE = """
import contextlib, io, json, os, sys, traceback
names = sys.argv[1:]
sys.argv = ["manage.py", "help"]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "likes_project.settings.production")
from django.core.management import ManagementUtility
out = {}
for name in names:
    stdout, stderr, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            ManagementUtility(["manage.py", "help", name]).execute()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
    out[name] = [code, stdout.getvalue(), stderr.getvalue()]
sys.__stdout__.write(json.dumps(out))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    """`manage.py help <command>` for every command on the default (production) settings with no secrets."""
    proc = subprocess.run([PYTHON, "-c", PROBE, *NAMES], cwd=ROOT, env=bare_env(), capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {name: subprocess.CompletedProcess(["manage.py", "help", name], code, out, err)
            for name, (code, out, err) in json.loads(proc.stdout).items()}


def test_help_needs_no_secrets_but_anything_else_still_refuses():
    assert manage("upsert_video", "--help", env=bare_env()).returncode == 0
    refused = manage("check", env=bare_env())
    assert refused.returncode != 0 and "Production settings refuse to start" in refused.stderr


def test_the_project_commands_are_listed():
    assert {"upsert_video", "migrate_all", "drill", "requeue_dead_outbox"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_command_prints_its_help_as_an_operator_runs_it(helps, name):
    proc = helps[name]
    assert proc.returncode == 0, f"manage.py help {name} exited {proc.returncode}:\n{proc.stderr[-2000:]}"
    assert f"usage: manage.py {name}" in proc.stdout, proc.stdout[:500]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_upsert_video_version_prints_djangos_version():
    proc = manage("upsert_video", "--version", env=bare_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == django.get_version()


def test_upsert_video_help_names_its_modes(helps):
    out = helps["upsert_video"].stdout
    assert "--service-version N" in out and "--override" in out and "--clear-override" in out
    assert "Django's own" in " ".join(out.split())
