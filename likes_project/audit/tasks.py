"""Thin Celery wrappers of the audit chain's services."""

from __future__ import annotations

from celery import shared_task

from likes_project.audit.services import chain_checkpoint_write


@shared_task(name="audit.chain_checkpoint", acks_late=True, ignore_result=True)
def chain_checkpoint_task() -> dict:
    """Beat job (hourly): record the chain's head as a (signed) checkpoint, which catches a deleted tail."""
    cp = chain_checkpoint_write()
    return {"checkpoint": cp.pk, "seq": cp.seq, "signed": cp.signed}
