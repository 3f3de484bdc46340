"""The approved ledgers' approve, resume and abort commands: a ledger's command module is its docstring, its help
and the `ledger` it drives (plus, for approve, the fields of its result). Each checks the approver's permission,
goes through the ledger's service (which audits) and prints the kit's JSON last line with `--json`."""

from __future__ import annotations

from django.core.management.base import CommandError

from likes_project.audit.services import cli_actor_resolve
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

    def result_fields(self, m: ApprovedLedgerModel) -> dict:
        """What this kind of ledger adds to the result (between copiedRows and error)."""
        return {}

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
                  "copiedRows": m.copied_rows, **self.result_fields(m), "error": m.error or None}
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
