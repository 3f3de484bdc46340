"""Database leases with fencing tokens (consistency-techniques S2). The only module that grants,
renews or checks leases. Every layer's singletons hold one (consumer passes, the publisher, ops jobs,
generations, snapshots), so it sits at the top of the core; its rows are the event log's `Lease` model,
whose table was created there."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from likes_project.eventlog.models import Lease


@dataclass(frozen=True)
class LeaseGrant:
    resource: str
    holder: str
    token: int


class LeaseLost(Exception):
    """The lease moved to another holder (or expired and was taken): stop writing."""


_ACQUIRE_SQL = """
INSERT INTO {t} (resource, holder, fencing_token, expires_at, acquired_at, renewed_at)
VALUES (%(r)s, %(h)s, 1, %(exp)s, %(now)s, %(now)s)
ON CONFLICT (resource) DO UPDATE
   SET holder = EXCLUDED.holder,
       fencing_token = {t}.fencing_token + CASE WHEN {t}.holder = EXCLUDED.holder THEN 0 ELSE 1 END,
       expires_at = EXCLUDED.expires_at,
       acquired_at = CASE WHEN {t}.holder = EXCLUDED.holder THEN {t}.acquired_at ELSE EXCLUDED.acquired_at END,
       renewed_at = EXCLUDED.renewed_at
 WHERE {t}.holder = EXCLUDED.holder OR {t}.expires_at < %(now)s
RETURNING fencing_token
"""


def one_statement(sql: str, params: dict) -> tuple | None:
    """Run one statement on `default` as its own transaction and return its first row: in autocommit, one round
    trip (an atomic block around a single statement adds a BEGIN and a COMMIT, issue 34 §2). Called inside a
    transaction it is still `atomic(durable=True)`: refused there, as before, since a grant or a fenced write must
    commit on its own."""
    if connection.in_atomic_block:
        with transaction.atomic(using="default", durable=True), connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone() if cursor.description else None
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() if cursor.description else None


def lease_acquire(*, resource: str, holder: str, ttl_s: float) -> LeaseGrant | None:
    """Take the lease if it is free, expired or already ours. None when someone else holds it.

    Transaction: one statement on `default`. A change of holder increments the fencing token.
    """
    now = timezone.now()
    row = one_statement(_ACQUIRE_SQL.format(t=Lease._meta.db_table),
                        {"r": resource, "h": holder, "exp": now + dt.timedelta(seconds=ttl_s), "now": now})
    return None if row is None else LeaseGrant(resource, holder, row[0])


def lease_renew(grant: LeaseGrant, *, ttl_s: float) -> None:
    """Extend our lease; raises LeaseLost if the token is no longer ours."""
    now = timezone.now()
    updated = Lease.objects.filter(
        resource=grant.resource, holder=grant.holder, fencing_token=grant.token, expires_at__gte=now
    ).update(expires_at=now + dt.timedelta(seconds=ttl_s), renewed_at=now)
    if updated != 1:
        raise LeaseLost(grant.resource)


_RELEASE_SQL = ("UPDATE {t} SET expires_at = %(exp)s "
                "WHERE resource = %(r)s AND holder = %(h)s AND fencing_token = %(tok)s")


def lease_release(grant: LeaseGrant) -> None:
    """Give the lease up early (expire it); a no-op if it is no longer ours. One statement (a pass ends with it)."""
    with connection.cursor() as cursor:
        cursor.execute(_RELEASE_SQL.format(t=Lease._meta.db_table),
                       {"exp": timezone.now() - dt.timedelta(seconds=1), "r": grant.resource, "h": grant.holder,
                        "tok": grant.token})


def lease_fence_cte(grant: LeaseGrant, *, renew_ttl_s: float | None = None, release: bool = False) -> tuple[str, dict]:
    """`lease_held AS (...)` and its parameters, for a statement that writes under `grant` in one round trip:
    the lease row while `grant` is still the lease (whatever its expiry, as `lease_hold`), locked, and renewed by
    `renew_ttl_s` or expired by `release` in the same statement. The write must carry
    `EXISTS (SELECT 1 FROM lease_held)`: it happens only while the grant holds, and commits with the renewal."""
    params = {"lease_r": grant.resource, "lease_h": grant.holder, "lease_tok": grant.token}
    where = "resource = %(lease_r)s AND holder = %(lease_h)s AND fencing_token = %(lease_tok)s"
    table = Lease._meta.db_table
    if not release and renew_ttl_s is None:
        return f"lease_held AS (SELECT 1 FROM {table} WHERE {where} FOR UPDATE)", params
    now = timezone.now()
    params.update(lease_exp=now - dt.timedelta(seconds=1) if release else now + dt.timedelta(seconds=renew_ttl_s),
                  lease_now=now)
    return (f"lease_held AS (UPDATE {table} SET expires_at = %(lease_exp)s, renewed_at = %(lease_now)s "
            f"WHERE {where} RETURNING 1)"), params


def lease_hold(grant: LeaseGrant, *, renew_ttl_s: float | None = None) -> bool:
    """Inside the caller's transaction on `default`: lock the lease row while `grant` is still the
    lease (no other holder has taken it, whatever its expiry), so a write fenced by it commits only
    while that holds. False when it moved: the caller must abandon its write. `renew_ttl_s`: renew it in the
    same statement (the renewal commits with the caller's write: one commit, not two; issue 34 §2)."""
    held = Lease.objects.filter(resource=grant.resource, holder=grant.holder, fencing_token=grant.token)
    if renew_ttl_s is None:
        return held.select_for_update().exists()
    now = timezone.now()
    return held.update(expires_at=now + dt.timedelta(seconds=renew_ttl_s), renewed_at=now) == 1


def lease_is_ours(grant: LeaseGrant) -> bool:
    """`grant` is still the lease (no other holder took it), whatever its expiry: `lease_hold`'s rule, unlocked."""
    return Lease.objects.filter(resource=grant.resource, holder=grant.holder, fencing_token=grant.token).exists()


def lease_is_current(grant: LeaseGrant) -> bool:
    return Lease.objects.filter(resource=grant.resource, fencing_token=grant.token, holder=grant.holder,
                                expires_at__gte=timezone.now()).exists()


def lease_is_held(resource: str) -> bool:
    """Someone holds `resource` now (the lease exists and has not expired)."""
    return Lease.objects.filter(resource=resource, expires_at__gte=timezone.now()).exists()


def lease_holder_alive(resource: str, holder: str) -> bool:
    """`holder` still holds `resource`: its lease has not expired (or it was never taken, when the
    holder has not reached the acquire yet, which is not alive either)."""
    return Lease.objects.filter(resource=resource, holder=holder, expires_at__gte=timezone.now()).exists()
