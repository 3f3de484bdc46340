"""Add or remove a block: the blocked user may not like the blocker's videos."""

from relations.management.edge_command import EdgeCommand
from relations.services.social import block_set


class Command(EdgeCommand):
    help = "Make <blocker> block <blocked> (or, with --remove, lift the block)."
    first, second, model_name = "blocker", "blocked", "block"

    def set_edge(self, a, b, *, present, actor):
        return block_set(blocker_id=a.pk, blocked_id=b.pk, present=present, actor=actor)

    def describe(self, a, b, *, removed):
        return f"{a.username} {'no longer blocks' if removed else 'blocks'} {b.username}"
