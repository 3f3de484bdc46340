"""Add or remove a block: the blocked user may not like the blocker's videos."""

from relations.management.edge_command import EdgeCommand
from relations.services.social import block_set


class Command(EdgeCommand):
    help = "Make <blocker> block <blocked> (or, with --remove, lift the block)."
    first, second, model_name = "blocker", "blocked", "block"
    setter, keys = staticmethod(block_set), ("blocker_id", "blocked_id")
    said = ("{a} blocks {b}", "{a} no longer blocks {b}")
