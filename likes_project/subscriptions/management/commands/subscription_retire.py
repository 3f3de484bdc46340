"""manage.py subscription_retire NAME [--reason TEXT] [--actor USER] [--json]"""

from __future__ import annotations

from likes_project.subscriptions.management.commands._move import MoveCommand


class Command(MoveCommand):
    help = "Retire a subscription for good: its token is refused and the log stops holding back for it."
    move = "retire"
