"""The `manage.py` lines of the docs, read and checked against the real parsers (tests/test_cli_docs.py runs
them): the doc reader (fenced blocks and inline code spans of README.md and DOCS), the synopsis grammar
(`[optional]`, `(a | b)` alternatives, `a|b` value choices, `<placeholder>` and `N`-style metavars) and what
the command's real parser says of a line."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parent.parent
# The README's reference sections live in docs/ (issue 29 §8): every file that shows commands.
DOCS = ("README.md", "docs/runbook.md", "docs/operations.md", "docs/api.md", "docs/upgrading.md",
        "docs/configuration.md", "docs/scaling-out.md", "docs/status.md")

# --- reading the docs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DocLine:
    doc: str  # the file, relative to the checkout
    line: int
    text: str  # "manage.py <command> ...", as written (table escapes `\|` undone)

    @property
    def command(self) -> str:
        return self.text.split()[1]

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


INVOCATION = re.compile(r"manage\.py\s+([a-z][a-z0-9_]*)\b.*")
# What may stand before `manage.py` in a command: nothing, `./`, or a Python interpreter (by path).
COMMAND_START = re.compile(r"^(|\./|(.*[\s/])?python3?)$")


def _code_of(doc: str) -> list[tuple[int, str]]:
    """(line number, code text) of every fenced-block line and every inline code span."""
    out, fenced, pending = [], False, ""
    for number, raw in enumerate((ROOT / doc).read_text().splitlines(), 1):
        if raw.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            pending += raw.rstrip()
            if pending.endswith("\\"):  # a shell line continued on the next one
                pending = pending[:-1] + " "
                continue
            out.append((number, pending))
            pending = ""
        else:
            out += [(number, span) for span in re.findall(r"`([^`]+)`", raw)]
    return out


def doc_lines() -> list[DocLine]:
    """Every `manage.py <command> ...` the docs' code shows, one per shell command (`a && b` is two);
    prose that only names `manage.py` (an architecture sketch: "manage.py start ops jobs") is not one."""
    found = []
    for doc in DOCS:
        for number, code in _code_of(doc):
            for command in re.split(r"&&|\|\||;", code.replace("\\|", "|")):
                match = INVOCATION.search(command)
                if match and COMMAND_START.match(command[:match.start()].strip()):
                    found.append(DocLine(doc, number, " ".join(match.group(0).split())))
    return found


# --- the synopsis grammar --------------------------------------------------------------------------
# A synopsis is a sequence of words, `[optional parts]` and `(alternative | parts)`; a word with `|`
# inside (`public|friends|private`) is a value choice.


@dataclass
class Seq:
    items: list


@dataclass
class Opt:
    alternatives: list[Seq]


@dataclass
class Group:
    alternatives: list[Seq]


def _tokens(text: str) -> list[str]:
    out = []
    for word in text.split():
        while word[:1] in "[(":
            out.append(word[0])
            word = word[1:]
        tail = []
        while word[-1:] in "])":
            tail.insert(0, word[-1])
            word = word[:-1]
        out += ([word] if word else []) + tail
    return out


def parse(text: str) -> Seq:
    tokens = _tokens(text)[2:]  # after "manage.py <command>"
    pos = 0

    def alternatives(closer: str | None) -> list[Seq]:
        nonlocal pos
        alts, items = [], []
        while pos < len(tokens):
            tok = tokens[pos]
            pos += 1
            if tok == closer:
                break
            if tok in "])" and len(tok) == 1:
                raise AssertionError(f"unbalanced {tok!r} in {text!r}")
            if tok == "|":
                alts.append(Seq(items))
                items = []
            elif tok == "[":
                items.append(Opt(alternatives("]")))
            elif tok == "(":
                items.append(Group(alternatives(")")))
            else:
                items.append(tok)
        else:
            if closer is not None:
                raise AssertionError(f"{closer!r} missing in {text!r}")
        return [*alts, Seq(items)]

    alts = alternatives(None)
    assert len(alts) == 1, f"a top-level | in {text!r}"
    return alts[0]


def is_option(word) -> bool:
    return isinstance(word, str) and word.startswith("--")


def is_value(word) -> bool:
    return isinstance(word, str) and not word.startswith("-")


def options_shown(seq: Seq) -> list[tuple[str, str | None]]:
    """Every (option, the value the doc gives it or None) anywhere in the synopsis."""
    out = []
    for i, item in enumerate(seq.items):
        if isinstance(item, (Opt, Group)):
            for alt in item.alternatives:
                out += options_shown(alt)
        elif is_option(item):
            nxt = seq.items[i + 1] if i + 1 < len(seq.items) else None
            out.append((item, nxt if is_value(nxt) else None))
    return out


def positionals_shown(seq: Seq) -> list[str]:
    """The positional words of the synopsis's top level (not an option's value)."""
    out = []
    for i, item in enumerate(seq.items):
        prev = seq.items[i - 1] if i else None
        if is_value(item) and not is_option(prev):
            out.append(item)
    return out


def expansions(seq: Seq, skip) -> list[list]:
    """Every argv the synopsis allows with each alternative taken once and each optional part
    included, unless `skip(option)` says to leave out the optional part that starts with it."""
    variants: list[list] = [[]]
    for item in seq.items:
        if isinstance(item, Opt) and any(is_option(w) and skip(w) for alt in item.alternatives
                                              for w in alt.items[:1]):
            continue
        if isinstance(item, (Opt, Group)):
            choices = [e for alt in item.alternatives for e in expansions(alt, skip)]
            variants = [v + c for v, c in itertools.product(variants, choices)]
        else:
            variants = [[*v, item] for v in variants]
    return variants


# --- what the real parser says -------------------------------------------------------------------


def parser_of(command: str):
    return load_command_class(get_commands()[command], command).create_parser("manage.py", command)


def takes_value(action) -> bool:
    return action.nargs != 0


def problems(line: DocLine) -> list[str]:
    """What in the doc line does not match the command's parser (empty: the line is right)."""
    if line.command not in get_commands():
        return [f"there is no command {line.command!r}"]
    parser = parser_of(line.command)
    actions = parser._option_string_actions
    seq = parse(line.text)
    found = []
    for option, value in options_shown(seq):
        action = actions.get(option)
        if action is None:
            found.append(f"{line.command} has no option {option}")
        elif value is None and takes_value(action):
            found.append(f"{option} takes a value the doc does not show")
        elif value is not None and not takes_value(action):
            found.append(f"{option} takes no value, the doc gives it {value!r}")
        elif value is not None and action.choices is not None and "|" in value:
            found += [f"{option} does not accept {c!r}" for c in value.split("|") if c not in action.choices]
    positional = [a for a in parser._actions if not a.option_strings and a.dest != "help"]
    required = [a for a in positional if a.nargs not in ("?", "*")]
    shown = positionals_shown(seq)
    if len(shown) > len(positional):
        found.append(f"{line.command} takes {len(positional)} positional argument(s), the doc shows {len(shown)}")
    elif len(shown) < len(required):
        found.append(f"{line.command} needs {len(required)} positional argument(s), the doc shows {len(shown)}")
    for group in parser._mutually_exclusive_groups:
        named = {o for o, _v in options_shown(seq)}
        if group.required and not any(set(a.option_strings) & named for a in group._group_actions):
            found.append(f"{line.command} needs one of {[a.option_strings[0] for a in group._group_actions]}")
    for action in parser._actions:
        if action.option_strings and action.required and not set(action.option_strings) & {
                o for o, _v in options_shown(seq)}:
            found.append(f"{line.command} needs {action.option_strings[0]}")
    return found
