"""API tokens (DRF's `Token`, one per user) as operators manage them (issue 10, D48): created for an
active user with a stated reason, revoked with a reason, both audited; the key is shown once, to whoever
created it, and never written anywhere else in clear (not in the audit log, the admin's LogEntry, a
message or a log line).

DRF's `Token.__str__` returns the key, so every surface that prints a token (admin titles and
breadcrumbs, LogEntry reprs, the objects listed before a user is deleted, log lines) would print the
secret: `token_label` is what they print instead (the console's AppConfig installs it as `__str__`).

Other writers of tokens: `manage.py create_api_user` (gets or creates a token and prints it, audited as
`user.create_api`/`user.reuse_api`), `seed_demo`, the drills' population, and account deletion
(`relations.services.accounts`, which removes the token inside its own audited transaction).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework.authtoken.models import Token

from likes_project.audit.services import Actor, audit_record
from likes_project.errors import Conflict, InvalidInput, NotFound, UserNotFound

TOKEN_VIEW_PERMISSION = "authtoken.view_token"
TOKEN_ADD_PERMISSION = "authtoken.add_token"
TOKEN_REVOKE_PERMISSION = "authtoken.delete_token"


class TokenExists(Conflict):
    code = "token_exists"
    default_message = "This user already has an API token; revoke it first to issue a new one."


class TokenNotFound(NotFound):
    code = "token_not_found"
    default_message = "This user has no API token."


def token_fingerprint(key: str) -> str:
    """What may be shown of a key: its first 4 characters and a SHA-256 prefix. Enough to tell which
    token a client holds; far too little to use or guess it."""
    return f"{key[:4]}…{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def token_label(token: Token) -> str:
    """A token as every screen and log line may print it (no query: the user's id, not their name)."""
    return f"API token {token_fingerprint(token.key)} of user {token.user_id}" if token.key else "API token"


@dataclass(frozen=True)
class TokenCreated:
    user_id: int
    username: str
    fingerprint: str
    key: str = field(repr=False)  # for the one response that shows it; never stored by the caller


@dataclass(frozen=True)
class TokenRevoked:
    user_id: int
    username: str
    fingerprint: str


def token_create(*, user_id: int, actor: Actor, reason: str) -> TokenCreated:
    """Issue the API token of an active user who has none, audited ("token.create", with the key's
    fingerprint and the reason, never the key). Whoever holds the key acts as that user on the API,
    which is why this needs its own permission and a reason.

    Transaction: one durable transaction on `default` (the user row locked, the token, the audit record).
    Idempotency: none by design; a user who already has a token is refused (`TokenExists`): replacing a
    token is a revoke followed by a create, two audited decisions."""
    reason = reason.strip()
    if not reason:
        raise InvalidInput("Give a reason.", code="reason_required")
    with transaction.atomic(using="default", durable=True):
        user = get_user_model().objects.select_for_update().filter(pk=user_id).first()
        if user is None:
            raise UserNotFound()
        if not user.is_active:
            raise InvalidInput(f"{user.get_username()!r} is not active (deleted or disabled).", code="user_inactive")
        if Token.objects.filter(user_id=user_id).exists():
            raise TokenExists()
        token = Token.objects.create(user=user)
        fingerprint = token_fingerprint(token.key)
        audit_record(actor=actor, action="token.create", target_type="user", target_id=str(user_id),
                     params={"username": user.get_username(), "fingerprint": fingerprint, "reason": reason})
    return TokenCreated(user_id=user_id, username=user.get_username(), fingerprint=fingerprint, key=token.key)


def token_revoke(*, user_id: int, actor: Actor, reason: str) -> TokenRevoked:
    """Delete a user's API token, audited ("token.revoke", with its fingerprint and the reason). Clients
    using it get 401 from the next request on.

    Transaction: one durable transaction on `default` (the token row locked and deleted, the audit record).
    Idempotency: a user without a token is refused (`TokenNotFound`); nothing is written."""
    reason = reason.strip()
    if not reason:
        raise InvalidInput("Give a reason.", code="reason_required")
    with transaction.atomic(using="default", durable=True):
        token = Token.objects.select_for_update().select_related("user").filter(user_id=user_id).first()
        if token is None:
            raise TokenNotFound()
        revoked = TokenRevoked(user_id=user_id, username=token.user.get_username(),
                               fingerprint=token_fingerprint(token.key))
        Token.objects.filter(pk=token.pk).delete()
        audit_record(actor=actor, action="token.revoke", target_type="user", target_id=str(user_id),
                     params={"username": revoked.username, "fingerprint": revoked.fingerprint, "reason": reason})
    return revoked
