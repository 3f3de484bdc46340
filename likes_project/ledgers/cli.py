"""The approved ledgers' five commands (plan, approve, resume, abort, show): a ledger's command module is its
docstring, its help and the `ledger` it drives, plus, for plan and show, what it names and prints. Each checks the
operator's permission, goes through the ledger's service (which audits) and prints the kit's JSON last line with
`--json`."""

from __future__ import annotations

from likes_project.audit.services import Actor
from likes_project.cli import ApproveCommand, OperatorCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from likes_project.ledgers.model import ApprovedLedgerModel, LedgerState
from likes_project.ledgers.service import ApprovedLedger


class LedgerCommand(OperatorCommand):
    """What the five commands share: the ledger, its id argument, its noun and permissions."""

    ledger: ApprovedLedger
    id_dest: str  # "move_id"
    id_metavar: str  # "MOVE_ID"

    @property
    def noun(self) -> str:
        return self.ledger.noun

    @property
    def permission(self) -> str:
        """The approve permission: approve, resume and abort act under it (plan under the plan permission)."""
        return self.ledger.approve_permission

    def add_id_argument(self, parser, **kwargs) -> None:
        parser.add_argument(self.id_dest, metavar=self.id_metavar, **kwargs)

    def tail_lines(self, m: ApprovedLedgerModel) -> list[str]:
        """The show command's last lines: the verification, the error."""
        lines = []
        if m.verify_result:
            lines.append(f"  verify: {'ok' if m.verify_result.get('ok') else 'FAILED'} "
                         f"({m.verify_result.get('rowsCompared', 0)} rows compared)")
        if m.error:
            lines.append(f"  error: {m.error}")
        return lines


class LedgerApproveCommand(LedgerCommand, ApproveCommand):
    """ID --actor USER [--wait] [--json]: the CLI kit's approve command (`ApproveCommand`) on a ledger; exit 1 when
    refused, when the ledger FAILED or was ABORTED, or when --wait ran out before it was RETIRED."""

    runs, follows_until, wait_timeout_s = "run", "is RETIRED", 1800.0
    failed_statuses = (LedgerState.FAILED, LedgerState.ABORTED)

    def approve(self, request_id: int, actor: Actor) -> ApprovedLedgerModel:
        return self.ledger.approve(request_id, actor=actor)

    def wait(self, request_id: int, *, timeout_s: float) -> ApprovedLedgerModel:
        return self.ledger.wait(request_id, timeout_s=timeout_s, on_change=lambda x: self.stderr.write(f"  {x.state}"))

    def status(self, m: ApprovedLedgerModel) -> str:
        return m.state

    def failure_reason(self, m: ApprovedLedgerModel) -> str:
        return m.error or m.abort_reason

    def unfinished(self, m: ApprovedLedgerModel, *, timeout_s: float) -> str:
        return f"{self.name(m)} is {m.state} after --wait" + (f": {m.error}" if m.error else "")

    def result(self, m: ApprovedLedgerModel) -> dict:
        return {self.ledger.id_param: m.pk, "status": m.state, "writePauseMs": m.write_pause_ms,
                "copiedRows": m.copied_rows, **self.ledger.progress_fields(m), "error": m.error or None}

    def line(self, m: ApprovedLedgerModel) -> str:
        return super().line(m) + (f"; write pause {m.write_pause_ms:.1f} ms" if m.write_pause_ms is not None else "")


class LedgerResumeCommand(LedgerCommand):
    """ID [--actor USER] [--json]: a new job from the ledger; exit 1 when there is nothing to resume."""

    def add_arguments(self, parser):
        self.add_id_argument(parser)
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def act(self, options: dict, actor: Actor) -> ApprovedLedgerModel:
        return self.ledger.resume(options[self.id_dest], actor=actor)

    def result(self, m: ApprovedLedgerModel) -> dict:
        return {self.ledger.id_param: m.pk, "status": m.state, "jobId": m.job_id}

    def line(self, m: ApprovedLedgerModel) -> str:
        return f"{self.name(m)}: {m.state}; resumed by job {m.job_id}"


class LedgerAbortCommand(LedgerCommand):
    """ID --reason TEXT [--actor USER] [--json]: before the switch only."""

    def add_arguments(self, parser):
        self.add_id_argument(parser)
        parser.add_argument("--reason", required=True, help="Why (recorded in the ledger and the audit log).")
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def act(self, options: dict, actor: Actor) -> ApprovedLedgerModel:
        return self.ledger.abort(options[self.id_dest], actor=actor, reason=options["reason"])

    def result(self, m: ApprovedLedgerModel) -> dict:
        return {self.ledger.id_param: m.pk, "status": m.state}

    def line(self, m: ApprovedLedgerModel) -> str:
        return f"{self.name(m)}: {m.state}"


class LedgerPlanCommand(LedgerCommand):
    """--WHAT ... --to WHERE --reason TEXT --actor USER [--json]: AWAITING_APPROVAL; exit 1 when refused. A ledger's
    plan command adds its own flags (`add_plan_arguments`), calls its plan service (`plan`) and says what its result
    holds (`plan_result`)."""

    @property
    def permission(self) -> str:
        return self.ledger.plan_permission

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

    def act(self, options: dict, actor: Actor) -> ApprovedLedgerModel:
        return self.plan(options, actor)

    def result(self, m: ApprovedLedgerModel) -> dict:
        return {self.ledger.id_param: m.pk, "status": m.state, **self.plan_result(m)}

    def line(self, m: ApprovedLedgerModel) -> str:
        return f"{self.name(m)}: {m.state}; {self.ledger.summary(m)}, {m.rows_to_copy} rows to copy"


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
