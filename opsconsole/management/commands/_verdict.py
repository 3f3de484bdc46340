"""What `manage.py drill` and `manage.py soak` share: a refusal (`DrillRefused`) is "<what> refused: ..." and exit 1;
the verdict is printed as text, or as JSON with --json, and a FAIL exits 1 with the command's `failure` line."""

from __future__ import annotations

import contextlib

from django.core.management.base import CommandError

from likes_project.cli import DomainCommand
from opsconsole.drills import DrillRefused


class VerdictCommand(DomainCommand):
    """A command that runs a drill (or a soak) and reports its verdict. It says what it runs (`what`) and the error
    line of a FAIL (`failure`); its `run` wraps the run in `refusals()` and ends with `verdict_print`."""

    what = ""  # "drill", "soak": in "drill refused: ..."

    def failure(self, verdict) -> str:
        raise NotImplementedError  # the CommandError of a FAIL: "drill worker-kill FAILED: ..."

    @contextlib.contextmanager
    def refusals(self):
        try:
            yield
        except DrillRefused as exc:
            raise CommandError(f"{self.what} refused: {exc}") from exc

    def verdict_print(self, verdict, options: dict) -> None:
        self.stdout.write(verdict.as_json() if options["json"] else verdict.as_text())
        if not verdict.passed:
            raise CommandError(self.failure(verdict))
