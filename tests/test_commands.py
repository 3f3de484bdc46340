"""Every management command of this project builds its parser and prints its help (a command whose
options collide with Django's base options fails before it runs); `upsert_video --service-version N`
is the video service's version and `--version` stays Django's own flag (issue 10 §5). The same as an
operator runs them, in subprocesses: tests/test_cli_help.py; every command the docs show:
tests/test_cli_docs.py."""

import io

import pytest
from django.core.management import CommandError, call_command, get_commands, load_command_class

from likes_project.opsjobs.models import OpsJob
from relations.models import VideoSnapshot
from tests.factories import make_user

pytestmark = pytest.mark.topology_independent

OWN_APPS = ("likes_project", "relations", "counting", "reconciliation", "opsconsole")
OWN = sorted((name, app) for name, app in get_commands().items() if app.split(".")[0] in OWN_APPS)


def test_the_project_has_commands():
    assert {"upsert_video", "delete_account", "rebuild_relation_cache", "migrate_all",
            "prune_noop_commands", "requeue_dead_letters", "discard_dead_letters", "requeue_dead_outbox",
            "drill"} <= {n for n, _ in OWN}


@pytest.mark.parametrize(("name", "app"), OWN, ids=[n for n, _ in OWN])
def test_every_command_prints_its_help(name, app):
    parser = load_command_class(app, name).create_parser("manage.py", name)
    assert f"usage: manage.py {name}" in parser.format_help()


@pytest.mark.django_db(databases="__all__")
def test_upsert_video_service_version_is_the_video_services_version():
    author = make_user("upsert-author")
    out = io.StringIO()
    call_command("upsert_video", "v-cmd-1", "--author", author.username, "--service-version", "7", stdout=out)
    assert VideoSnapshot.objects.get(video_id="v-cmd-1").version == 7
    assert "service push v7 applied" in out.getvalue()
    call_command("upsert_video", "v-cmd-1", "--author", author.username, "--service-version", "5", stdout=out)
    assert VideoSnapshot.objects.get(video_id="v-cmd-1").version == 7  # not newer: ignored
    assert "ignored" in out.getvalue()
    call_command("upsert_video", "v-cmd-1", "--override", "--visibility", "private", "--reason", "test", stdout=out)
    assert VideoSnapshot.objects.get(video_id="v-cmd-1").version == 7  # an override takes no service version
    call_command("upsert_video", "v-cmd-1", "--author", author.username, "--service-version", "8", stdout=out)
    row = VideoSnapshot.objects.get(video_id="v-cmd-1")
    assert (row.version, row.visibility, row.service_visibility) == (8, "private", "public")


def test_upsert_video_version_is_djangos_own_flag(capsys):
    import django

    parser = load_command_class("relations", "upsert_video").create_parser("manage.py", "upsert_video")
    assert "--service-version N" in parser.format_help()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == django.get_version()


@pytest.mark.django_db(databases="__all__")
@pytest.mark.parametrize("argv", [["rebuild_relation_cache", "--chunk", "0"],
                                  ["rebuild_count_cache", "--sample", "-1"],
                                  ["rebuild_reverse_index", "--shards", "2", "--chunk", "-5"]])
def test_a_rebuild_command_refuses_a_bad_size_and_starts_nothing(argv):
    with pytest.raises(CommandError, match="invalid_parameter"):
        call_command(*argv, stdout=io.StringIO(), stderr=io.StringIO())
    assert OpsJob.objects.count() == 0
