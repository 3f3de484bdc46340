"""Add or remove a friendship between two users."""

from relations.management.edge_command import EdgeCommand
from relations.services.social import friendship_set


class Command(EdgeCommand):
    help = "Make two users friends (or, with --remove, not friends)."
    first, second, model_name = "user_a", "user_b", "friendship"
    setter, keys = staticmethod(friendship_set), ("user_a", "user_b")
    said = ("{a} and {b}: friends", "{a} and {b}: not friends")
