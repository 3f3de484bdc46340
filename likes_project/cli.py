"""The CLI kit every management command uses: domain errors become clean CLI errors (no tracebacks,
non-zero exit, nothing half-written), users are resolved by username, and long actions run as ops
jobs, in the foreground with a progress bar or, with `--async`, on the workers while the command
follows them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from likes_project.audit.services import cli_actor_resolve
from likes_project.errors import DomainError, UserNotFound


def add_json_argument(parser) -> None:
    parser.add_argument("--json", action="store_true", help="Print one JSON object on the last line of stdout.")


def emit(command, options: dict, payload: dict, text: str) -> None:
    """`--json`: one JSON object as the last line of stdout; otherwise the text."""
    command.stdout.write(json.dumps(payload, sort_keys=True, default=str) if options.get("json") else text)


def refuse(command, options: dict, exc: DomainError, *, returncode: int = 1) -> CommandError:
    """The CommandError for a domain refusal; with --json its envelope ({"code", "message"}) is printed first."""
    if options.get("json"):
        command.stdout.write(json.dumps(exc.as_dict(), sort_keys=True, default=str))
    return CommandError(f"{exc.code}: {exc.message}", returncode=returncode)


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


class OperatorCommand(DomainCommand):
    """A command an operator runs under `permission`: `act` calls the service as the resolved operator (`--actor`,
    or the OS user where the flag is optional); a refusal exits 1, with --json its envelope ({"code", "message"})
    printed first. Otherwise it prints `result` as the JSON last line with --json, or `line`."""

    noun: str = ""  # in messages: "repair 3: FAILED"
    permission: str = ""

    def act(self, options: dict, actor):
        raise NotImplementedError  # the command's one service call; returns the row it made or changed

    def result(self, row) -> dict:
        raise NotImplementedError  # the JSON the command prints last

    def line(self, row) -> str:
        raise NotImplementedError  # the text it prints without --json

    def name(self, row) -> str:
        return f"{self.noun} {row.pk}"

    def acted(self, options: dict):
        try:
            return self.act(options, cli_actor_resolve(username=options.get("actor"), permission=self.permission))
        except DomainError as exc:
            raise refuse(self, options, exc) from exc

    def run(self, *args, **options):
        row = self.acted(options)
        emit(self, options, self.result(row), self.line(row))


class ApproveCommand(OperatorCommand):
    """ID --actor USER [--wait] [--wait-timeout S] [--json]: approve a request another operator made (never your
    own; `likes_project.approvals`); the system runs it on the workers. Exit 1 when refused, when it ended in one
    of `failed_statuses`, or when --wait ran out before it finished. A command says its `noun` ("repair"), what
    the workers do (`runs`: "run", "apply"), its id argument, the approve permission and its three service calls
    (`approve`, `wait`, `result`); a request whose row names its status otherwise says so in `status`."""

    runs: str
    id_dest: str
    id_metavar: str
    failed_statuses: tuple[str, ...]
    follows_until = "ends"  # --wait's help: "Follow the repair until it ends."
    wait_timeout_s = 600.0

    def approve(self, request_id: int, actor):
        raise NotImplementedError  # the request's approve service

    def wait(self, request_id: int, *, timeout_s: float):
        raise NotImplementedError  # following the request until it finished, bounded

    def status(self, row) -> str:
        return row.status

    def failure_reason(self, row) -> str:
        return row.error

    def unfinished(self, row, *, timeout_s: float) -> str:
        return f"{self.name(row)} is still {self.status(row)} after {timeout_s:.0f} s"

    def line(self, row) -> str:
        return f"{self.name(row)}: {self.status(row)}" + (f" ({row.error})" if row.error else "")

    def act(self, options: dict, actor):
        return self.approve(options[self.id_dest], actor)

    def add_arguments(self, parser):
        parser.add_argument(self.id_dest, type=int, metavar=self.id_metavar)
        parser.add_argument("--actor", required=True, help="The approving operator's username.")
        parser.add_argument("--wait", action="store_true",
                            help=f"Follow the {self.noun} until it {self.follows_until}.")
        parser.add_argument("--wait-timeout", type=float, default=self.wait_timeout_s,
                            help="Seconds --wait follows it at most.")
        add_json_argument(parser)

    def run(self, *args, **options):
        row = self.acted(options)
        if options["wait"]:
            self.stderr.write(f"{self.name(row)} approved; the workers {self.runs} it (job {row.job_id}); "
                              "following it")
            row = self.wait(row.pk, timeout_s=options["wait_timeout"])
        emit(self, options, self.result(row), self.line(row))
        if self.status(row) in self.failed_statuses:
            raise CommandError(f"{self.name(row)} {self.status(row)}: {self.failure_reason(row)}")
        if options["wait"] and not row.finished:
            raise CommandError(self.unfinished(row, timeout_s=options["wait_timeout"]))


class RejectCommand(OperatorCommand):
    """ID --reason TEXT --actor USER [--json]: reject a request that awaits approval (nothing is run). A command
    says its `noun`, its id argument (`id_dest`, `id_metavar`), the approve permission and its `reject` service."""

    id_dest: str
    id_metavar = "ID"

    def reject(self, request_id: int, actor, reason: str):
        raise NotImplementedError  # the request's reject service

    def add_arguments(self, parser):
        parser.add_argument(self.id_dest, type=int, metavar=self.id_metavar)
        parser.add_argument("--reason", default="", help="Why (required).")
        parser.add_argument("--actor", required=True, help="The rejecting approver's username.")
        add_json_argument(parser)

    def act(self, options, actor):
        return self.reject(options[self.id_dest], actor, options["reason"])

    def line(self, row):
        return f"{self.name(row)}: {row.status}"


class ShowCommand(DomainCommand):
    """ID [--json]: one record's report, as the JSON last line with --json or as `text`; exit 1 when there is no
    such record, with --json its refusal envelope ({"code", "message"}) printed first. A command names its argument
    (`id_dest`, `id_metavar`, `id_type`) and says what it reports (`report`, a DomainError when there is nothing)."""

    id_dest: str
    id_metavar: str
    id_type: type | None = None  # argparse's: the argument as given

    def report(self, key) -> dict:
        raise NotImplementedError  # the record's lookup and its report

    def text(self, report: dict) -> str:
        raise NotImplementedError  # what it prints without --json

    def add_arguments(self, parser):
        parser.add_argument(self.id_dest, type=self.id_type, metavar=self.id_metavar)
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            report = self.report(options[self.id_dest])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, report, self.text(report))


class JobCommand(DomainCommand):
    """A command whose work is an ops job (the same job the admin starts): in the foreground it runs
    the job here with a progress bar on stderr (a plain line per progress message when stderr is not a
    terminal); with `--async` it leaves the job to the workers (the `ops` queue) and follows it until it
    ends. Ctrl-C while following stops following, not the job."""

    job_kind: str = ""
    permission: str = ""

    def add_job_arguments(self, parser) -> None:
        self.add_actor_argument(parser)
        parser.add_argument("--async", dest="run_async", action="store_true",
                            help="Start the job on the workers and follow its progress (Ctrl-C stops following).")

    def job_run(self, *, options: dict, params: dict, target: str = ""):
        """Start the job as the resolved operator, run or follow it to its end, and return it."""
        from likes_project.opsjobs.services import job_run_inline, job_start

        actor = cli_actor_resolve(username=options.get("actor"), permission=self.permission)
        job = job_start(kind=self.job_kind, actor=actor, params=params, target=target)
        with self._progress_bar(job) as (say, show):
            if options.get("run_async"):
                self.stderr.write(f"job {job.pk} ({job.kind}) started on the workers; following it")
                job = self._follow(job, say, show)
            else:
                job = job_run_inline(job.pk, on_say=say, on_progress=show)
        return job

    @contextlib.contextmanager
    def _progress_bar(self, job):
        from tqdm import tqdm

        bar = tqdm(total=job.total, unit=f" {job.unit}", file=self.stderr, disable=None, dynamic_ncols=True,
                   leave=False)

        def say(message: str) -> None:
            if bar.disable:
                self.stderr.write(message)
            else:
                bar.write(message, file=self.stderr)

        def show(current) -> None:
            if current.total is not None and bar.total != current.total:
                bar.total = current.total
            bar.n = current.done
            bar.refresh()

        try:
            yield say, show
        finally:
            bar.close()

    def _follow(self, job, say, show, *, poll_s: float = 0.5):
        from likes_project.opsjobs.models import OpsJob

        last_message = ""
        try:
            while True:
                job = OpsJob.objects.get(pk=job.pk)
                show(job)
                if job.message and job.message != last_message:
                    last_message = job.message
                    say(job.message)
                if job.finished:
                    return job
                time.sleep(poll_s)  # --async follows a job on other workers: poll its row, no event to wait on
        except KeyboardInterrupt:
            raise CommandError(f"stopped following job {job.pk}; it goes on on the workers (see the admin's "
                               f"Ops jobs page)") from None

    @staticmethod
    def out_file_open(raw: str):
        """`--out`'s absolute path and a temporary file beside it (`.NAME.*.part`, renamed over it when the export
        is complete): an unwritable directory or a directory given as the file fails before any work."""
        out_path = Path(raw).expanduser().absolute()
        if out_path.is_dir():
            raise CommandError(f"--out {out_path} is a directory.")
        try:
            # Closed by `job_file_deliver` (or the command's own `with tmp`).
            tmp = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=out_path.parent, delete=False,  # noqa: SIM115
                                              prefix=f".{out_path.name}.", suffix=".part")
        except OSError as exc:
            raise CommandError(f"Cannot write to {out_path.parent}: {exc.strerror or exc}.") from exc
        return out_path, tmp

    def job_file_deliver(self, job, tmp, out_path) -> None:
        """Copy the file a finished job wrote to `out_path`, through `tmp` (an open temporary file beside it,
        renamed over it at the end): the destination is complete or untouched."""
        from likes_project.opsjobs.services import job_file_path

        source = job_file_path(job)
        if job.status != "SUCCEEDED" or source is None:
            raise self.job_failed(job)
        with tmp, open(source, encoding="utf-8") as src:
            shutil.copyfileobj(src, tmp)
        os.replace(tmp.name, out_path)

    def job_failed(self, job) -> CommandError:
        return CommandError(f"job {job.pk} ({job.kind}) failed: {job.last_error or job.status}")


class RebuildCommand(JobCommand):
    """A generation rebuild's command: its size options (`size_options`: name -> help, whole numbers
    the lifecycle checks), the job, one summary line from the run's report, and a non-zero exit when
    the new generation did not become ACTIVE. Subclasses set `job_kind`, `permission`, `report` (the
    lifecycle's RunReport) and `size_options`, and say the outcome in `summary` and `failure`."""

    report: type
    size_options: dict[str, str] = {}

    def add_arguments(self, parser):
        self.add_rebuild_arguments(parser)
        for name, text in self.size_options.items():
            parser.add_argument(f"--{name}", type=int, default=None, help=text)
        self.add_job_arguments(parser)

    def add_rebuild_arguments(self, parser) -> None:
        """Required arguments of this rebuild (the reverse index's --shards); none by default."""

    def params(self, options: dict) -> dict:
        return {name: options[name] for name in self.size_options if options[name] is not None}

    def summary(self, report) -> str:
        return f"generation {report.generation}: {report.status}"

    def failure(self, report) -> str:
        return f"rebuild of generation {report.generation} failed ({report.failure})"

    def run(self, *args, **options):
        from likes_project.generations.jobs import generation_of_job

        report = self.report.of(generation_of_job(self.job_run(options=options, params=self.params(options))))
        self.stdout.write(self.summary(report))
        if report.status != "ACTIVE":
            raise CommandError(self.failure(report))
