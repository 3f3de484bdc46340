"""List, set and clear the runtime switches (issue 14 §3; likes_project/switches.py): read-only likes, the
outbox publisher of a relation shard, a consumer (or one partition of it), auto-repair, a video's display
refreshes. Setting needs a reason; every change is checked against the kind's permission and audited. A
change takes effect on every process within SWITCH_CACHE_S seconds."""

from __future__ import annotations

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError, InvalidInput
from likes_project.switches import SwitchState, switch_model, switch_permission, switch_set, switches_set
from relations import validation

KINDS_HELP = ("read-only (no key), publisher SHARD, consumer NAME or NAME:PARTITION (count, count:3), "
              "auto-repair (no key), refresh VIDEO_ID")


def _line(state: SwitchState) -> str:
    when = state.updated_at.isoformat(timespec="seconds") if state.updated_at else "-"
    return (f"{state.kind} {state.key}: {'SET' if state.paused else 'clear'} by {state.updated_by or '-'} at {when}"
            f"{f' ({state.reason})' if state.reason else ''}")


class Command(DomainCommand):
    help = ("Runtime switches: `switch list` shows every switch that is set; `switch set KIND [KEY] --reason TEXT` "
            "and `switch clear KIND [KEY]` change one (audited). Kinds: " + KINDS_HELP + ".")

    def add_arguments(self, parser):
        # One flat parser (no subparsers), so the synopsis in the README is the parser's own.
        parser.add_argument("action", choices=("list", "set", "clear"),
                            help="list: every switch that is set; set / clear: change one.")
        parser.add_argument("kind", nargs="?", default=None, help=f"set / clear: the switch kind: {KINDS_HELP}.")
        parser.add_argument("key", nargs="?", default=None, help="The switch's key, for the kinds that have one.")
        parser.add_argument("--reason", default="", help="Why (required to set; recorded in the audit log).")
        parser.add_argument("--actor", help="Operator username to record (must hold the kind's permission).")
        parser.add_argument("--all", action="store_true", help="list: also the switches that were cleared again.")
        add_json_argument(parser)

    def handle(self, *args, **options):
        try:
            return self.run(*args, **options)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc

    def run(self, *args, **options):
        if options["action"] == "list":
            if options["kind"] or options["key"] or options["reason"] or options.get("actor"):
                raise InvalidInput("`switch list` takes no KIND, KEY, --reason or --actor.", code="invalid_option")
            states = switches_set(include_cleared=options["all"])
            text = "\n".join(_line(s) for s in states) or "no switch is set"
            emit(self, options, [s.as_json() for s in states], text)
            return
        if options["kind"] is None:
            raise InvalidInput(f"switch {options['action']} needs a KIND: {KINDS_HELP}.", code="switch_kind_required")
        if options["all"]:
            raise InvalidInput("--all belongs to `switch list`.", code="invalid_option")
        paused = options["action"] == "set"
        model = switch_model(options["kind"], options["key"])
        key = model.switch_key_clean(options["key"])
        if model.switch_kind == "refresh":
            validation.video_id(key)
        actor = cli_actor_resolve(username=options.get("actor"), permission=switch_permission(model))
        row = switch_set(kind=model.switch_kind, key=key, paused=paused, reason=options["reason"], actor=actor)
        state = SwitchState.of(row)
        emit(self, options, state.as_json(), _line(state))
