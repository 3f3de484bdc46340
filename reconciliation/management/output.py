"""What the reconciliation commands share: `--json` prints one JSON object as the last line of stdout,
also for a refusal ({"code", "message"}), and the exit status says the verdict. (The helpers live in
`likes_project.cli`, which the counting commands use too.)"""

from likes_project.cli import add_json_argument, emit, refuse

__all__ = ["add_json_argument", "emit", "refuse"]
