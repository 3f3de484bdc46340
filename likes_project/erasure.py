"""An account's erasure from what the service keeps downstream of its relations (issue 31 §4, PRIV-4): one
registry of erasers, one pseudonym.

Each app that keeps a deleted account's user id outside the relation facts registers an eraser in its
`AppConfig.ready()` (`account_eraser_register`); the account deletion runs them all once its withdrawal is
done (`account_erase_everywhere`). An eraser is idempotent (a second run finds nothing) and returns a small
report for the deletion's audit record. Where a row must stay (evidence, a tombstone) the user id is replaced by
the account's pseudonym (`user_pseudonym`), never kept."""

from __future__ import annotations

from collections.abc import Callable

from django.utils.crypto import salted_hmac

_ERASERS: dict[str, Callable[[int], dict]] = {}


def account_eraser_register(name: str, eraser: Callable[[int], dict]) -> None:
    _ERASERS[name] = eraser


def account_erasers() -> dict[str, Callable[[int], dict]]:
    return dict(sorted(_ERASERS.items()))


def account_erase_everywhere(user_id: int) -> dict[str, dict]:
    """Every registered eraser, in name order; their reports by name."""
    return {name: eraser(user_id) for name, eraser in account_erasers().items()}


def user_pseudonym(user_id: int) -> str:
    """The service's stable pseudonym of a user (HMAC-SHA256 keyed by SECRET_KEY, 32 hex digits): what the
    audit log and retained rows keep of a deleted account. Not reversible without the key; the same user always
    gets the same one, so the records of one account still read as one."""
    return salted_hmac("likes.user-pseudonym", str(int(user_id)), algorithm="sha256").hexdigest()[:32]
