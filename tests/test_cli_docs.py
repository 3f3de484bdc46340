"""Every `manage.py` command the README or the runbook shows runs as shown (issue 10 §6b).

The code of README.md and the docs in DOCS (fenced blocks and inline code spans) is read for
`manage.py <command> ...`; each one is parsed as the synopsis it is (`[optional]`, `(a | b)`
alternatives, `a|b` value choices, `<placeholder>` and `N`-style metavars), checked against the
command's real parser (the command exists; every option exists and takes a value exactly when the doc
gives one; documented choices are accepted), then run through `call_command` against the real stores
with the placeholders replaced by real users, videos, dead letters and outbox rows: each alternative
once, optional parts included. What cannot run in a test is listed in NOT_RUN with the reason;
lines the docs get wrong, for the doc owner to fix, are in KNOWN_WRONG (each is still checked to be
wrong, and to be still in the docs)."""

from __future__ import annotations

import io
import re
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from tests import doclines
from tests.doclines import DocLine, doc_lines, expansions, is_option, parse, problems

pytestmark = pytest.mark.topology_independent

# --- the lists the doc owner keeps ----------------------------------------------------------------

# Doc lines that cannot run in a test, by command (all its lines) or by exact text: why.
NOT_RUN = {
    "drill": "a drill injects real faults (ALTER DATABASE ... ALLOW_CONNECTIONS false on a shard, FLUSHDB, SIGKILL "
             "of the workers) and needs worker and beat processes; tests/test_drills.py runs the drills in-suite",
    "soak": "a soak drives a running service over HTTP for its duration while injecting the drills' faults; "
            "tests/test_soak.py runs one in-suite",
}
# Run as shown, with the exception named: `drill --restore-databases` only re-allows connections.
RUN_ANYWAY = {"manage.py drill --restore-databases"}
# Opt flags left out of the run (still checked against the parser): why.
NOT_RUN_OPTIONS = {
    "--async": "starts the job on the Celery workers and follows it; no worker runs in the suite "
               "(tests/opsconsole/test_jobs_admin.py plays the worker for --async)",
    "--wait": "follows the approved repair's job on the Celery workers; no worker runs in the suite "
              "(tests/reconciliation/test_commands.py runs the job for --wait)",
}
# Doc lines known to be wrong, for the doc owner to fix (README.md and docs/ are not this test's to
# edit). Each must still be wrong as listed; once fixed, delete its entry.
KNOWN_WRONG: dict[str, str] = {}  # none today; an entry is a doc line awaiting its fix, with why

# --- placeholders --------------------------------------------------------------------------------

# Slots on the first relation shard under contract v1 (even slots: rel_00), moved onto the second.
SLOT_MOVE_SLOTS, SLOT_MOVE_TARGET = "0,2", "rel_01"


class Stores:
    """Real users, videos, likes, dead letters and outbox rows for the placeholders of one doc line."""

    def __init__(self, tmp_path: Path):
        from relations.services.commands import relation_set_state
        from tests.factories import make_user, make_video

        tag = uuid.uuid4().hex[:6]
        self.tmp_path = tmp_path
        self.operator = get_user_model().objects.create_superuser(f"doc-operator-{tag}", password="x")
        self.author = make_user(f"doc-author-{tag}")
        self.user = make_user(shard=settings.RELATION_SHARD_ALIASES[0])  # its like is a DEAD outbox row below
        self.doomed = make_user(f"doc-doomed-{tag}")
        self.video_id = f"doc-video-{tag}"
        make_video(self.video_id, self.author)
        for u in (self.user, self.doomed):
            relation_set_state(user_id=u.pk, video_id=self.video_id, desired_state="LIKED", operation_id=f"op-{tag}")
        self.tag = tag
        from django_celery_beat.models import IntervalSchedule, PeriodicTask
        from rest_framework.authtoken.models import Token

        Token.objects.get_or_create(user=self.user)  # revoked by `api_token revoke`
        self.tokenless = make_user(f"doc-tokenless-{tag}")  # issued one by `api_token issue`
        every, _ = IntervalSchedule.objects.get_or_create(every=10, period=IntervalSchedule.SECONDS)
        self.periodic_task = PeriodicTask.objects.create(name=f"doc-task-{tag}", task="eventlog.redrive",
                                                         interval=every)

    def dead_letter_ids(self) -> str:
        from likes_project.eventlog.consumer import dead_letter_record
        from likes_project.eventlog.models import DeadLetter
        from likes_project.eventlog.streams import StreamEntry, stream_key

        ids = []
        for i in range(2):  # poison: an event without the contract's fields (requeued, it stays poison)
            entry = StreamEntry(partition=0, stream_key=stream_key(0), entry_id=f"{i + 1}-0",
                                event={"eventId": str(uuid.uuid4()), "videoId": self.video_id})
            dead_letter_record(consumer="count", entry=entry, error=ValueError("doc test poison"), attempts=1)
            ids.append(DeadLetter.objects.get(consumer="count", entry_id=entry.entry_id).pk)
        return ",".join(map(str, ids))

    def dead_outbox_ids(self) -> str:
        from relations.models import OutboxEvent

        alias = settings.RELATION_SHARD_ALIASES[0]
        rows = OutboxEvent.objects.using(alias).order_by("id")[:2]
        ids = [r.pk for r in rows]
        OutboxEvent.objects.using(alias).filter(pk__in=ids).update(status="DEAD", last_error="doc test")
        return ",".join(map(str, ids))

    def diff_id(self) -> str:
        """A diff a check found on the fixture video (made as a run would record it)."""
        from reconciliation.models import CheckDiff, CheckRun

        run = CheckRun.objects.create(mode="identity", status="FAILED", scope={"videos": [self.video_id]},
                                      actor="tests", channel="cli")
        return str(CheckDiff.objects.create(run=run, video_id=self.video_id, layer="display", expected=2,
                                            actual=3).pk)

    def repair_id(self) -> str:
        """A repair another operator requested (the doc line's --actor approves or shows it)."""
        from likes_project.audit.services import Actor
        from reconciliation.services.repair import repair_request

        requester = get_user_model().objects.create_superuser(f"doc-requester-{self.tag}", password="x")
        return str(repair_request(actor=Actor(requester.username, "cli"), source="facts", reason="docs test",
                                  videos=[self.video_id]).pk)

    def snapshot_id(self) -> str:
        """A SEALED recovery snapshot of the fixture's counts (taken once per doc line)."""
        if not getattr(self, "_snapshot", None):
            from likes_project.audit.services import Actor
            from reconciliation.services.recovery import snapshot

            taken = snapshot.snapshot_build(snapshot.snapshot_create(actor=Actor("tests", "cli"), reason="docs").pk)
            assert taken.status == "SEALED", taken.failure
            self._snapshot = str(taken.pk)
        return self._snapshot

    def migration_id(self, command: str) -> str:
        """A bucket migration another operator planned (awaiting approval; for `resume`, approved and its
        job stopped)."""
        from counting.services.migration import ledger
        from likes_project.audit.services import Actor
        from likes_project.opsjobs.models import OpsJob

        requester = get_user_model().objects.create_superuser(f"doc-planner-{uuid.uuid4().hex[:6]}", password="x")
        m = ledger.migration_plan(target="cnt_02", buckets="0-3", reason="docs test",
                                  actor=Actor(requester.username, "cli"))
        if command == "bucket_migration_resume":
            m = ledger.migration_approve(migration_id=m.pk, actor=Actor(self.operator.username, "cli"))
            OpsJob.objects.filter(pk=m.job_id).update(status="FAILED")
        return str(m.pk)

    def move_id(self, command: str) -> str:
        """A relation slot move another operator planned (awaiting approval; for `resume`, approved and its job
        stopped)."""
        from likes_project.audit.services import Actor
        from likes_project.opsjobs.models import OpsJob
        from relations.services.slot_moves import ledger

        requester = get_user_model().objects.create_superuser(f"doc-mover-{uuid.uuid4().hex[:6]}", password="x")
        m = ledger.move_plan(slots=SLOT_MOVE_SLOTS, target=SLOT_MOVE_TARGET, reason="docs test",
                             actor=Actor(requester.username, "cli"))
        if command == "relation_slot_move_resume":
            m = ledger.move_approve(move_id=m.pk, actor=Actor(self.operator.username, "cli"))
            OpsJob.objects.filter(pk=m.job_id).update(status="FAILED")
        return str(m.pk)

    def event_id(self) -> str:
        """The event id of the fixture user's like (its outbox row)."""
        from relations.models import OutboxEvent

        alias = settings.RELATION_SHARD_ALIASES[0]
        return str(OutboxEvent.objects.using(alias).filter(aggregate_key=f"{self.user.pk}:{self.video_id}")
                   .values_list("event_id", flat=True).first())

    def risk_id(self, command: str) -> str:
        """A risk hide of the fixture user's like, requested by another operator: awaiting approval (approve,
        reject), or approved and applied (restore)."""
        from counting.risk import services as risk
        from likes_project.audit.services import Actor
        from likes_project.opsjobs.services import job_run_inline

        requester = get_user_model().objects.create_superuser(f"doc-risk-{uuid.uuid4().hex[:6]}", password="x")
        decision = risk.risk_hide_request(actor=Actor(requester.username, "cli"), video_id=self.video_id,
                                          usernames=[self.user.username], reason="docs test")
        if command == "risk_restore":
            decision = risk.risk_approve(decision_id=decision.pk, actor=Actor(self.operator.username, "cli"))
            job = job_run_inline(decision.job_id)
            assert job.status == "SUCCEEDED", job.last_error
        return str(decision.pk)

    def subscription_name(self, command: str) -> str:
        """A new name (create), or a subscription in the state the command acts on (paused for resume)."""
        from likes_project.audit.services import Actor
        from likes_project.subscriptions import services as subscriptions

        name = f"doc-sub-{uuid.uuid4().hex[:6]}"
        if command != "subscription_create":
            subscriptions.subscription_create(name=name, owner="docs", purpose="docs test", fields=["videoId"],
                                              start_from="latest", actor=Actor("tests", "cli"))
        if command == "subscription_resume":
            subscriptions.subscription_move(name=name, move="pause", actor=Actor("tests", "cli"))
        if command == "subscription_replay":  # only a subscription behind its retention is replayed
            subscriptions.Subscription.objects.filter(name=name).update(status="BEHIND_RETENTION")
        return name

    def replay_id(self) -> str:
        """A replay of a subscription behind its retention, requested by another operator, awaiting approval."""
        from likes_project.audit.services import Actor
        from likes_project.subscriptions import replay

        name = self.subscription_name("subscription_replay")
        return str(replay.replay_request(name=name, actor=Actor("doc-requester", "cli"), reason="docs test").pk)

    def value(self, line: DocLine, option: str | None, word: str) -> str:
        """The real value for one placeholder word of the synopsis."""
        if line.command.startswith("subscription_") and option is None and word == "NAME":
            return self.subscription_name(line.command)
        if line.command == "subscription_create" and option == "--fields":
            return "videoId,state"
        if line.command == "switch" and option is None and word in ("KIND", "KEY"):
            return "publisher" if word == "KIND" else settings.RELATION_SHARD_ALIASES[0]
        if line.command == "trace" and option in ("--operation", "--user", "--event"):
            return {"--operation": f"op-{self.tag}", "--user": self.user.username, "--event": self.event_id()}[option]
        if line.command.startswith("risk_") and option is None and word == "ID":
            return self.risk_id(line.command)
        if line.command.startswith("subscription_replay_") and option is None and word == "ID":
            return self.replay_id()
        if line.command == "risk_hide" and option == "--user":
            return self.user.username
        if option == "--users-file":
            path = self.tmp_path / "users.txt"
            path.write_text(f"{self.user.username}\n")
            return str(path)
        if option == "--since" and word == "SEQ_OR_ISO_TIME":
            return "1"
        by_command_positional = {
            "create_api_user": f"doc-new-{self.tag}", "delete_account": self.doomed.username,
            "export_user_likes": self.user.username, "risk_account": self.user.username,
        }
        if option is None and word == "REPAIR_ID":
            return self.repair_id()
        if option is None and word == "SNAPSHOT_ID":
            return self.snapshot_id()
        if option is None and word == "MIGRATION_ID":
            return self.migration_id(line.command)
        if option is None and word == "MOVE_ID":
            return self.move_id(line.command)
        if line.command.startswith("relation_slot_move") and option == "--to":
            return SLOT_MOVE_TARGET
        if option == "--slots":
            return SLOT_MOVE_SLOTS
        if option == "--to" and word == "PARTITION":
            return "cnt_02"
        if option == "--buckets" and word == "RANGES":
            return "0-3"
        if option == "--source" and word == "snapshot:ID":
            return f"snapshot:{self.snapshot_id()}"
        if option == "--diff":
            return self.diff_id()
        if option == "--video":
            return self.video_id
        if option is None and word.startswith("<"):
            if line.command == "api_token":
                return self.user.username if " revoke " in line.text else self.tokenless.username
            if line.command == "periodic_task":
                return self.periodic_task.name
            if line.command in by_command_positional:
                return by_command_positional[line.command]
            return {"<videoId>": self.video_id, "<a>": self.user.username, "<b>": self.author.username,
                    "<blocker>": self.author.username, "<blocked>": self.user.username}[word]
        if option == "--ids":
            return self.dead_outbox_ids() if line.command == "requeue_dead_outbox" else self.dead_letter_ids()
        if option == "--author":
            return self.author.username
        if option == "--actor":
            return self.operator.username
        if option == "--out":
            return str(self.tmp_path / "likes.jsonl")
        if option == "--shard":
            return settings.RELATION_SHARD_ALIASES[0]
        if option == "--reason":
            return "docs test"
        if option == "--retention-hours":
            return "168"
        if option == "--service-version":
            return "2"  # the fixture video is at service version 1
        if "|" in word:
            return word.split("|")[0]
        if re.fullmatch(r"[A-Z]+|N", word):
            return "2"
        return word


def argv_of(line: DocLine, variant: list[str], stores: Stores) -> list[str]:
    argv, prev = [], None
    for word in variant:
        argv.append(word if is_option(word) else stores.value(line, prev if is_option(prev) else None, word))
        prev = word
    return argv


def _known(line: DocLine):
    return KNOWN_WRONG.get(line.text)


def _not_run(line: DocLine):
    if line.text in RUN_ANYWAY:
        return None
    return NOT_RUN.get(line.command) or NOT_RUN.get(line.text)


LINES = doc_lines()
IDS = [f"{line.doc}:{line.line}:{line.command}" for line in LINES]
# Each distinct command line runs once (the first place that shows it): the same text runs the same way wherever
# it is shown, and every place is still checked against the parser above.
RUN_LINES = list({line.text: line for line in reversed(LINES)}.values())[::-1]
RUN_IDS = [f"{line.doc}:{line.line}:{line.command}" for line in RUN_LINES]
# Commands that set their own transaction's isolation or hold a snapshot across their own commits: their doc lines
# run in a transactional test (every database flushed after it). Every other line runs inside the test's
# transaction, rolled back (a flush of every database after each of ~90 lines was most of this module's time).
OWN_TRANSACTIONS = {"reconcile", "repair_request", "snapshot_create", "snapshot_verify", "export_user_likes",
                    "export_video_likers", "bucket_space_create"}
RUN_PARAMS = [pytest.param(line, id=test_id, marks=pytest.mark.django_db(
    databases="__all__", transaction=line.command in OWN_TRANSACTIONS))
    for line, test_id in zip(RUN_LINES, RUN_IDS, strict=True)]

# --- the tests -----------------------------------------------------------------------------------


def test_the_docs_show_commands():
    assert len(LINES) >= 15, [str(x) for x in LINES]
    assert {"migrate_all", "upsert_video", "rebuild_relation_cache", "requeue_dead_letters"} <= {
        x.command for x in LINES}


@pytest.mark.parametrize("line", LINES, ids=IDS)
def test_every_command_and_option_the_docs_show_exists(line):
    found = problems(line)
    if _known(line):
        assert found, f"{line} is listed in KNOWN_WRONG but matches the parser now: delete its entry"
    else:
        assert not found, f"{line}: {'; '.join(found)}"


@pytest.mark.parametrize(("text", "expected"), [
    ("manage.py no_such_command", "there is no command 'no_such_command'"),
    ("manage.py upsert_video <videoId> --author <username> --no-such-flag", "has no option --no-such-flag"),
    ("manage.py upsert_video <videoId> --author --service-version 2", "--author takes a value"),
    ("manage.py upsert_video <videoId> --override yes --reason TEXT", "--override takes no value"),
    ("manage.py upsert_video <videoId> --service-version 2 --author A [--visibility public|secret]",
     "--visibility does not accept 'secret'"),
    ("manage.py upsert_video --service-version 2 --author A", "needs 1 positional argument(s)"),
    ("manage.py upsert_video <videoId> --author A", "needs one of ['--service-version', '--override'"),
    ("manage.py requeue_dead_outbox --all", "needs --shard"),
    ("manage.py migrate_all extra", "takes 0 positional argument(s)"),
])
def test_the_check_catches_what_a_doc_line_can_get_wrong(text, expected):
    found = problems(DocLine("synthetic.md", 1, text))
    assert any(expected in p for p in found), found


def test_the_docs_reader_takes_commands_not_prose(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("Run `manage.py seed_demo` or `python manage.py count_bootstrap`.\n"
                   "```\noperators: the admin site and manage.py start ops jobs\n"
                   ".venv/bin/python manage.py migrate_all && ./manage.py collectstatic \\\n  --noinput\n```\n"
                   "| `manage.py drill <name> [--json]` \\| `manage.py` alone |\n")
    monkeypatch.setattr(doclines, "ROOT", tmp_path)
    monkeypatch.setattr(doclines, "DOCS", ("doc.md",))
    assert [(x.line, x.text) for x in doc_lines()] == [
        (1, "manage.py seed_demo"), (1, "manage.py count_bootstrap"), (5, "manage.py migrate_all"),
        (5, "manage.py collectstatic --noinput"), (7, "manage.py drill <name> [--json]")]


def test_every_known_wrong_line_is_still_in_the_docs():
    shown = {x.text for x in LINES}
    stale = [text for text in KNOWN_WRONG if text not in shown]
    assert not stale, f"no longer in the docs (fixed?), delete from KNOWN_WRONG: {stale}"


@pytest.mark.parametrize("line", RUN_PARAMS)
def test_every_command_the_docs_show_runs_against_the_real_stores(line, tmp_path, settings):
    reason = _known(line) or _not_run(line)
    if reason:
        # A documented line that cannot run in a test (it starts long-lived processes or injects faults),
        # each listed in NOT_RUN with its reason; its parser check above still runs.
        pytest.skip(f"not run: {reason}")
    settings.LIKES_DRILLS_ENABLED = True  # only `drill --restore-databases` gets here (RUN_ANYWAY)
    settings.STATIC_ROOT = str(tmp_path / "static")  # `collectstatic` writes here, not into the checkout
    stores = Stores(tmp_path)
    variants = expansions(parse(line.text), skip=lambda option: option in NOT_RUN_OPTIONS)
    assert variants
    for variant in variants:
        argv = argv_of(line, variant, stores)
        out, err = io.StringIO(), io.StringIO()
        try:
            call_command(line.command, *argv, stdout=out, stderr=err)
        except BaseException as exc:  # SystemExit too: a parser that exits is a failure here
            raise AssertionError(f"{line}\n  ran: manage.py {line.command} {' '.join(argv)}\n  failed: {exc!r}\n"
                                 f"  stdout: {out.getvalue()[-500:]}\n  stderr: {err.getvalue()[-500:]}") from exc
