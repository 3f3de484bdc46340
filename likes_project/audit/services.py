"""Audit trail and operator identity for every operational action (OPS, non-negotiable 6).

Every app records its actions through `audit_record`, inside the transaction of the action itself,
so the record and the change commit together. An action that runs inside an ops job is tagged with
the job's id through `job_context`, set by the job runner.
"""

from __future__ import annotations

import contextlib
import contextvars
import getpass
import logging
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from likes_project.audit import chain
from likes_project.audit.models import AuditChainCheckpoint, AuditChainVerification, AuditRecord, ChainStatus
from likes_project.errors import Forbidden, InvalidInput

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Actor:
    name: str
    channel: str  # admin | cli | api | system


_current_job: contextvars.ContextVar[int | None] = contextvars.ContextVar("likes_audit_job", default=None)


@contextlib.contextmanager
def job_context(job_id: int | None):
    """Tag every audit record written inside the block with `job_id`."""
    token = _current_job.set(job_id)
    try:
        yield
    finally:
        _current_job.reset(token)


def audit_record(*, actor: Actor, action: str, target_type: str, target_id: str, params: dict,
                 outcome: str = "applied") -> AuditRecord:
    """Append one audit row, chained to the one before it (D82). Must run inside the caller's
    transaction on `default`, so the audit row and the change it describes commit together.

    Transaction: the caller's. The chain lock (a transaction-level advisory lock) is taken here and held
    until that transaction ends, so appenders are serialised from this call to their commit: seqs are
    gap-free and in commit order, and two appenders can never both extend the same head. Inside the lock:
    one indexed read of the head (with the database clock, so `at` follows `seq`) and the insert."""
    conn = transaction.get_connection("default")
    if not conn.in_atomic_block:
        raise RuntimeError("audit_record must run inside the action's transaction on default")
    params = chain.params_canonical(params)  # before the lock: it needs no database
    fields = {"actor": actor.name, "channel": actor.channel, "action": action, "target_type": target_type,
              "target_id": str(target_id), "params": params, "outcome": outcome, "job_id": _current_job.get()}
    with conn.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [chain.CHAIN_LOCK_KEY])
        # A statement of its own after the lock: its snapshot sees every appender that committed before it.
        cursor.execute(_HEAD_SQL)
        at, head_seq, head_hash = cursor.fetchone()
    seq, prev_hash = (head_seq + 1, head_hash) if head_seq is not None else (1, chain.GENESIS)
    row_hash = chain.row_hash_compute(seq=seq, at=at, prev_hash=prev_hash, **fields)
    return AuditRecord.objects.create(at=at, seq=seq, prev_hash=prev_hash, row_hash=row_hash, **fields)


_HEAD_SQL = (f"SELECT clock_timestamp(), h.seq, h.row_hash FROM (SELECT 1) AS one LEFT JOIN LATERAL "
             f"(SELECT seq, row_hash FROM {AuditRecord._meta.db_table} WHERE seq IS NOT NULL "
             f"ORDER BY seq DESC LIMIT 1) AS h ON true")


def cli_actor_resolve(*, username: str | None, permission: str) -> Actor:
    """The operator behind a management command. With `--actor`, the named account must be active
    and hold `permission`; without it the OS account running the command (which already has shell
    access to the service) is recorded."""
    if not username:
        return Actor(name=f"os:{getpass.getuser()}", channel="cli")
    user = get_user_model().objects.filter(username=username).first()
    if user is None or not user.is_active:
        raise InvalidInput(f"--actor {username!r} is not an active user.", code="unknown_actor")
    if not user.has_perm(permission):
        raise Forbidden(f"{username!r} lacks the permission {permission}.", code="permission_denied")
    return Actor(name=username, channel="cli")


def admin_actor(user) -> Actor:
    return Actor(name=user.get_username(), channel="admin")


def api_actor(user_id: int) -> Actor:
    """The audit identity of an end user changing their own settings through the API."""
    return Actor(name=f"user:{user_id}", channel="api")


def system_actor(name: str) -> Actor:
    """A background job of the service itself (a loss detector, a sweeper)."""
    return Actor(name=name, channel="system")


# --- the chain's checkpoints and verifications (D82) -------------------------------------------------

CHECKPOINT_ACTOR = "audit-chain-checkpoint"
VERIFY_PERMISSION = "audit.verify_auditchain"


def chain_checkpoint_write(*, actor: Actor | None = None) -> AuditChainCheckpoint:
    """Record the chain's head as a checkpoint, HMAC-signed when AUDIT_CHAIN_SIGNING_KEY is set (the beat
    job `audit.chain_checkpoint`, hourly). The checkpoint's own audit record is the head it names: it is
    appended under the chain lock, so nothing else is appended between it and the checkpoint.

    Transaction: one durable transaction on `default` (the audit row and the checkpoint).
    Idempotency: each call adds one row and one checkpoint; a repeated call only checkpoints again."""
    from likes_project.audit.selectors import signing_key

    key = signing_key()
    key_id = chain.key_id_of(key) if key else ""
    with transaction.atomic(using="default", durable=True):
        head = audit_record(actor=actor or system_actor(CHECKPOINT_ACTOR), action="audit.chain_checkpoint",
                            target_type="audit_chain", target_id="head", params={"signed": bool(key), "keyId": key_id})
        signature = chain.checkpoint_sign(key, at=head.at, seq=head.seq, row_hash=head.row_hash)[0] if key else ""
        cp = AuditChainCheckpoint.objects.create(at=head.at, seq=head.seq, row_hash=head.row_hash,
                                                 signature=signature, key_id=key_id)
    # The log line is the checkpoint's copy outside the database (shipped with the logs); never the key.
    logger.info("audit chain checkpoint %s: seq %s row_hash %s key_id %s signature %s", cp.pk, cp.seq, cp.row_hash,
                key_id or "-", signature or "-")
    return cp


def chain_verification_record(*, report: dict, actor: Actor, job_id: int | None = None) -> AuditChainVerification:
    """Store a walk's verdict (what the console shows) and audit it ("audit.chain_verify").

    Transaction: one durable transaction on `default`."""
    broken = report["firstBroken"] or {}
    cp = report["checkpoint"] or {}
    with transaction.atomic(using="default", durable=True):
        verification = AuditChainVerification.objects.create(
            actor=actor.name, channel=actor.channel, job_id=job_id,
            status=ChainStatus.BROKEN if broken else ChainStatus.INTACT, since_seq=report["sinceSeq"],
            head_seq=report["headSeq"], checked=report["checked"], broken_seq=broken.get("seq"),
            problem=(broken.get("problem") or "")[:512], checkpoint_id=cp.get("id"), checkpoint_seq=cp.get("seq"),
            signature_checked=bool(cp.get("signatureChecked")))
        audit_record(actor=actor, action="audit.chain_verify", target_type="audit_chain",
                     target_id=f"{report['sinceSeq']}-{report['headSeq']}", outcome=report["status"],
                     params={"verification": verification.pk, "checked": report["checked"],
                             "firstBroken": report["firstBroken"], "checkpoint": cp.get("id")})
    if broken:
        logger.error("ALERT audit chain BROKEN at seq %s: %s", broken.get("seq"), broken.get("problem"))
    return verification
