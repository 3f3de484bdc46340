"""manage.py audit_verify [--since SEQ_OR_ISO_TIME] [--actor USER] [--async] [--json]

Walks the audit chain (D82) from `--since` (a seq, or the first row at or after an ISO-8601 time; default
the first row) to the head, recomputing each row_hash and checking prev_hash linkage, seq continuity and
the latest checkpoint (a deleted tail; its signature when AUDIT_CHAIN_SIGNING_KEY is set). A redacted row (a
deleted account's mentions replaced by its pseudonym) must be listed by a later `audit.redact` record
(`redaction_unrecorded` otherwise; likes_project/audit/redaction.py). It is the same
ops job the console starts, run here in the foreground with progress on stderr; the verdict is recorded
(the console shows it) and audited. Exit 0 intact, 1 broken, 3 not run (a bad --since, an actor without
`audit.verify_auditchain`, the job failed)."""

from __future__ import annotations

from django.core.management.base import CommandError

from likes_project.audit.jobs import VERIFY_JOB
from likes_project.audit.services import VERIFY_PERMISSION
from likes_project.cli import JobCommand, add_json_argument, emit, refuse
from likes_project.errors import Conflict, DomainError

NOT_RUN = 3


class Command(JobCommand):
    help = ("Verify the audit log's hash chain: every row's hash, its link to the row before, gap-free seqs, and the "
            "latest checkpoint (a removed tail). Exit 0 intact, 1 broken (the first broken seq is printed), 3 not run.")
    job_kind = VERIFY_JOB
    permission = VERIFY_PERMISSION

    def add_arguments(self, parser):
        parser.add_argument("--since", metavar="SEQ_OR_ISO_TIME",
                            help="Start at this seq, or at the first row at or after this ISO-8601 time (UTC unless "
                                 "it names a zone); linkage is still checked from the row before it.")
        self.add_job_arguments(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            job = self.job_run(options=options, params={"since": options.get("since")})
        except DomainError as exc:
            raise refuse(self, options, exc, returncode=NOT_RUN) from exc
        if job.status != "SUCCEEDED":
            failed = Conflict(f"job {job.pk} ({job.kind}) failed: {job.last_error or job.status}", code="verify_failed")
            raise refuse(self, options, failed, returncode=NOT_RUN)
        report = job.result
        broken = report["firstBroken"]
        cp = report["checkpoint"]
        text = (f"audit chain {'BROKEN' if broken else 'intact'}: {report['checked']} rows checked, seq "
                f"{report['sinceSeq']}..{report['headSeq']}")
        text += f"\n  checkpoint {cp['id']} at seq {cp['seq']} ({'signed' if cp['signed'] else 'unsigned'})" if cp \
            else "\n  no checkpoint yet: a removed tail cannot be detected"
        if broken:
            text += f"\n  first broken link: seq {broken['seq']}: {broken['problem']}"
        emit(self, options, report, text)
        if broken:
            raise CommandError(f"the audit chain is broken at seq {broken['seq']}", returncode=1)
