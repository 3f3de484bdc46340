"""manage.py subscription_resume NAME [--reason TEXT] [--actor USER] [--json]"""

from __future__ import annotations

from likes_project.subscriptions.management.commands._move import MoveCommand


class Command(MoveCommand):
    help = "Resume a paused subscription from where it acknowledged."
    move = "resume"
