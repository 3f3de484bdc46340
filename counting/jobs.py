"""The ops-job kind of a virtual-bucket migration (registered in CountingConfig.ready): the ledger kit's job,
which runs the protocol from the ledger's state (`likes_project.ledgers.jobs`)."""

from __future__ import annotations

from counting.services.migration import ledger, protocol
from likes_project.ledgers.jobs import ledger_job_kind

JOB_KINDS = [ledger_job_kind(ledger.LEDGER, protocol.migration_run)]
