"""manage.py subscription_pause NAME [--reason TEXT] [--actor USER] [--json]"""

from __future__ import annotations

from likes_project.subscriptions.management.commands._move import MoveCommand


class Command(MoveCommand):
    help = "Pause a subscription: its reads are refused, its position still holds the log back."
    move = "pause"
