"""The approved ledgers' five commands (plan, approve, resume, abort, show): a ledger's command module is its
docstring, its help and the `ledger` it drives, plus, for plan and show, what it names and prints. Each checks the
operator's permission, goes through the ledger's service (which audits) and prints the kit's JSON last line with
`--json`."""

from __future__ import annotations

from django.core.management.base import CommandError

from likes_project.audit.services import Actor, cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from likes_project.ledgers.model import ApprovedLedgerModel, LedgerState
from likes_project.ledgers.service import ApprovedLedger


class LedgerCommand(DomainCommand):
    ledger: ApprovedLedger
    id_dest: str  # "move_id"
    id_metavar: str  # "MOVE_ID"

    def add_id_argument(self, parser, **kwargs) -> None:
        parser.add_argument(self.id_dest, metavar=self.id_metavar, **kwargs)

    def approver(self, options: dict):
        return cli_actor_resolve(username=options.get("actor"), permission=self.ledger.approve_permission)

    def name(self, m: ApprovedLedgerModel) -> str:
        return f"{self.ledger.noun} {m.pk}"

    def tail_lines(self, m: ApprovedLedgerModel) -> list[str]:
        """The show command's last lines: the verification, the error."""
        lines = []
        if m.verify_result:
            lines.append(f"  verify: {'ok' if m.verify_result.get('ok') else 'FAILED'} "
                         f"({m.verify_result.get('rowsCompared', 0)} rows compared)")
        if m.error:
            lines.append(f"  error: {m.error}")
        return lines


class LedgerApproveCommand(LedgerCommand):
    """ID --actor USER [--wait] [--json]: exit 1 when refused, when the ledger FAILED or was ABORTED, or when --wait
    ran out before it was RETIRED."""

    def add_arguments(self, parser):
        self.add_id_argument(parser, type=int)
        parser.add_argument("--actor", required=True, help="The approving operator's username.")
        parser.add_argument("--wait", action="store_true", help=f"Follow the {self.ledger.noun} until it is RETIRED.")
        parser.add_argument("--wait-timeout", type=float, default=1800.0, help="Seconds --wait follows it at most.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            m = self.ledger.approve(options[self.id_dest], actor=self.approver(options))
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        if options["wait"]:
            self.stderr.write(f"{self.name(m)} approved; the workers run it (job {m.job_id}); following it")
            m = self.ledger.wait(m.pk, timeout_s=options["wait_timeout"],
                                 on_change=lambda x: self.stderr.write(f"  {x.state}"))
        result = {self.ledger.id_param: m.pk, "status": m.state, "writePauseMs": m.write_pause_ms,
                  "copiedRows": m.copied_rows, **self.ledger.progress_fields(m), "error": m.error or None}
        emit(self, options, result, f"{self.name(m)}: {m.state}" + (f" ({m.error})" if m.error else "")
             + (f"; write pause {m.write_pause_ms} ms" if m.write_pause_ms is not None else ""))
        if m.state in (LedgerState.FAILED, LedgerState.ABORTED):
            raise CommandError(f"{self.name(m)} {m.state}: {m.error or m.abort_reason}")
        if options["wait"] and m.state != LedgerState.RETIRED:
            raise CommandError(f"{self.name(m)} is {m.state} after --wait" + (f": {m.error}" if m.error else ""))


class LedgerResumeCommand(LedgerCommand):
    """ID [--actor USER] [--json]: a new job from the ledger; exit 1 when there is nothing to resume."""

    def add_arguments(self, parser):
        self.add_id_argument(parser)
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            m = self.ledger.resume(options[self.id_dest], actor=self.approver(options))
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, {self.ledger.id_param: m.pk, "status": m.state, "jobId": m.job_id},
             f"{self.name(m)}: {m.state}; resumed by job {m.job_id}")


class LedgerAbortCommand(LedgerCommand):
    """ID --reason TEXT [--actor USER] [--json]: before the switch only."""

    def add_arguments(self, parser):
        self.add_id_argument(parser)
        parser.add_argument("--reason", required=True, help="Why (recorded in the ledger and the audit log).")
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            m = self.ledger.abort(options[self.id_dest], actor=self.approver(options), reason=options["reason"])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, {self.ledger.id_param: m.pk, "status": m.state}, f"{self.name(m)}: {m.state}")


class LedgerPlanCommand(LedgerCommand):
    """--WHAT ... --to WHERE --reason TEXT --actor USER [--json]: AWAITING_APPROVAL; exit 1 when refused. A ledger's
    plan command adds its own flags (`add_plan_arguments`), calls its plan service (`plan`) and says what its result
    holds (`plan_result`)."""

    def add_plan_arguments(self, parser) -> None:
        raise NotImplementedError  # what moves where: every plan command names its flags

    def plan(self, options: dict, actor: Actor) -> ApprovedLedgerModel:
        raise NotImplementedError  # the ledger's plan service

    def plan_result(self, m: ApprovedLedgerModel) -> dict:
        return {}

    def add_arguments(self, parser):
        self.add_plan_arguments(parser)
        parser.add_argument("--reason", required=True, help="Why (recorded in the ledger and the audit log).")
        parser.add_argument("--actor", required=True, help="The requesting operator's username.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options["actor"], permission=self.ledger.plan_permission)
            m = self.plan(options, actor)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, {self.ledger.id_param: m.pk, "status": m.state, **self.plan_result(m)},
             f"{self.name(m)}: {m.state}; {self.ledger.summary(m)}, {m.rows_to_copy} rows to copy")


class LedgerShowCommand(LedgerCommand):
    """ID [--json]: the ledger's report (or, when `listed` and no ID, the newest 100 under `list_field`); exit 1
    when there is no such ledger. A ledger's show command says its lines (`show_lines`, `list_line`)."""

    listed = False  # without an ID, every ledger of the kind, newest first
    list_field = ""  # the JSON field of that list ("moves")

    def show_lines(self, m: ApprovedLedgerModel, report: dict) -> list[str]:
        raise NotImplementedError  # what the ledger prints above the kit's tail lines

    def list_line(self, report: dict) -> str:
        return f"{self.ledger.noun} {report[self.ledger.id_param]}: {report['status']}"

    def add_arguments(self, parser):
        if self.listed:
            parser.add_argument(self.id_dest, nargs="?", metavar=self.id_metavar)
        else:
            self.add_id_argument(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        if options[self.id_dest] is None:
            reports = [self.ledger.report(m) for m in self.ledger.model.objects.all()[:100]]
            emit(self, options, {self.list_field: reports},
                 "\n".join(self.list_line(r) for r in reports) or f"no {self.ledger.noun}")
            return
        try:
            m = self.ledger.get(options[self.id_dest])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        report = self.ledger.report(m)
        emit(self, options, report, "\n".join(self.show_lines(m, report) + self.tail_lines(m)))

    def who_line(self, m: ApprovedLedgerModel) -> str:
        return (f"requested by {m.requested_by}" + (f", approved by {m.approved_by}" if m.approved_by else "")
                + f"; reason: {m.reason}")
