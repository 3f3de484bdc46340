"""Add or remove a friendship between two users."""

from relations.management.edge_command import EdgeCommand
from relations.services.social import friendship_set


class Command(EdgeCommand):
    help = "Make two users friends (or, with --remove, not friends)."
    first, second, model_name = "user_a", "user_b", "friendship"

    def set_edge(self, a, b, *, present, actor):
        return friendship_set(user_a=a.pk, user_b=b.pk, present=present, actor=actor)

    def describe(self, a, b, *, removed):
        return f"{a.username} and {b.username}: {'not friends' if removed else 'friends'}"
