"""Finding the design ids the Python source cites: one regex per id shape, ranges, the T/D/L rules."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = Path("docs/requirements.md")
DESIGN_ENV = "REQUIREMENTS_DESIGN_DIR"
SCAN_DIRS = ("likes_project", "relations", "counting", "reconciliation", "opsconsole", "clients", "tests", "bench",
             "scripts")
SKIP_DIRS = {".venv", ".data", "__pycache__", ".git", ".hypothesis", ".ruff_cache"}
# This script and its test quote ids as examples and counter-examples, not as citations.
SELF = {"scripts/requirements_index.py", "scripts/reqindex/citations.py", "scripts/reqindex/definitions.py",
        "scripts/reqindex/doc.py", "tests/test_requirements_index.py"}

# Requirement families of spec.md: `PREFIX-n` (sub-ids `PREFIX-na` name a lettered item (a), (b) ...).
SPEC_PREFIXES = ("ARCH", "CMD", "CLI", "OUT", "PROJ", "BKT", "ROUTE", "MIG", "SNAP", "RCACHE", "CCACHE", "QRY",
                 "LIST", "REV", "REC", "REPAIR", "OPS", "SEC", "PRIV", "RISK", "OBS", "DEG", "TEST", "INV", "E")
# Technique families of consistency-techniques.md: a letter (RC: two) and a number, no hyphen.
GUIDE_PREFIXES = ("T", "O", "C", "I", "R", "B", "H", "K", "L", "D", "RC", "S", "W")
# The guide's "T" family (transaction boundaries) is T1..T5; spec.md's test matrix is T1..T34.
# Unqualified T6 and above can only be test-matrix rows; `render` fails if the guide grows past this.
GUIDE_T_MAX = 5
MAX_RANGE = 60  # "CMD-1 … CMD-18" expands; a wider span is two separate citations

# Lookarounds shared by every id regex: not part of a longer word, path or version ("sha256-be64",
# "x-T4", "v1.T2", "CMD-1.5"); a hyphen may follow only as a range connector ("T1-T4", "O2-O5") and
# precede only after a digit (the end of the range's first id). The look-behinds come after the
# literal prefix and look back over it, so `re` searches for the literal first (ten times faster).
_BEFORE = r"(?<![\w./%#$@\\]{p})(?<![A-Za-z]-{p})"
_AFTER = r"(?!\w)(?!-(?![A-Z]))(?!\.\d)"


def _family_regex(prefix: str, *, hyphen: bool) -> re.Pattern[str]:
    sub = "([a-z]?)" if hyphen else "()"
    p = re.escape(prefix)
    return re.compile(p + _BEFORE.format(p=p) + ("-" if hyphen else "") + r"([1-9]\d*)" + sub + _AFTER)


# One regex per id shape. `T<n>` and `D<n>` name two families each; `_classify` picks one.
SPEC_RES = {p: _family_regex(p, hyphen=True) for p in SPEC_PREFIXES}
GUIDE_RES = {p: _family_regex(p, hyphen=False) for p in GUIDE_PREFIXES}
# spec.md §8's metric list: M1..M16, no hyphen (`likes_commands_total{action}` is M1).
METRIC_RE = _family_regex("M", hyphen=False)
METRIC_MAX = 16
# spec.md §7's fault drills by their number: "drill 13", "Drill 4" (1..15; the word, then the number).
DRILL_RE = re.compile(r"(?<![\w-])[Dd]rill (\d{1,2})(?![\d.]\d?)")
DRILL_MAX = 15
_SECTION_NUM = r"§\s?(\d+(?:\.\d+)*)"
_SECTION_LIST = _SECTION_NUM + r"((?:\s*,\s*§\s?\d+(?:\.\d+)*)*)"
SPEC_SECTION_RE = re.compile(r"(?<![\w-])spec(?:\.md)?\s*" + _SECTION_LIST)
GUIDE_SECTION_RE = re.compile(r"(?<![\w-])consistency-techniques(?:\.md)?\s*" + _SECTION_LIST)
# "RCACHE-3, -5": a continuation that repeats the prefix of the id before it; "RCACHE-7d/e": a second letter.
_CONTINUATION = re.compile(r"\s*[,/]\s*-([1-9]\d*)([a-z]?)" + _AFTER)
_LETTER_CONTINUATION = re.compile(r"/([a-z])" + _AFTER)
_RANGE_GAP = re.compile(r"\s*(?:–|—|-|…|\.\.\.?|to)\s*")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>)]+")
# The clause a qualifier reaches: back to the last sentence end, semicolon, parenthesis or blank line.
_CLAUSE_END = re.compile(r"[.!?](?=\s)|[;()]|\n[ \t]*#?[ \t]*\n")
_QUALIFIERS = (
    ("guide", re.compile(r"consistency[- ]techniques?|\btechniques?\b", re.I)),
    ("matrix", re.compile(r"test[- ]matrix|\bmatrix rows?\b", re.I)),
    ("decisions", re.compile(r"\bdecisions?\b", re.I)),
)


@dataclass(frozen=True, order=True)
class Family:
    key: str  # "spec:CMD", "spec:T" (test matrix), "guide:T", "spec:§", "decisions:D" ...
    source: str  # spec | guide | decisions
    prefix: str
    checked: bool = True  # decisions are defined in this repo: listed, not checked


def family_of(key: str) -> Family:
    source, prefix = key.split(":", 1)
    return Family(key=key, source=source, prefix=prefix, checked=source != "decisions")


@dataclass(frozen=True)
class Citation:
    family: str  # a Family key
    id: str  # as written, sub-id kept: "RCACHE-7d", "T7", "spec §8.6"
    path: str
    line: int


def is_test_path(path: str) -> bool:
    return path.replace("\\", "/").startswith("tests/")


def _blank_urls(text: str) -> str:
    """URLs replaced by spaces of the same length, so positions and line numbers still hold."""
    return _URL.sub(lambda m: " " * len(m.group()), text)


def _qualifier(text: str, pos: int) -> str | None:
    """The nearest qualifier word before `pos` in the same clause: guide, matrix, decisions or None."""
    start = 0
    for m in _CLAUSE_END.finditer(text, 0, pos):
        start = m.end()
    clause = text[start:pos]
    best, best_at = None, -1
    for name, regex in _QUALIFIERS:
        for m in regex.finditer(clause):
            if m.start() > best_at:
                best, best_at = name, m.start()
    return best


def _classify(prefix: str, number: int, text: str, pos: int, is_test: bool) -> str | None:
    """The family of a guide-shaped id, or None when it is not a citation.

    T<n>: a qualifier in the same clause decides ("consistency-techniques T4" is a technique,
    "test-matrix rows T6 and T7" are test-matrix rows). Unqualified, T<n> above the guide's T1..T5
    is a test-matrix row; T1..T5 is a test-matrix row in a test module (tests exercise the matrix)
    and a technique in an application module (code applies techniques).
    D<n>: a technique only with a consistency-techniques qualifier, else a decision of
    docs/decisions.md ("decision D22", "(D31)").
    L<n>: a technique only with a qualifier; bare "L1" is the in-process cache level.
    Other letters: always techniques."""
    if prefix not in {"T", "D", "L"}:
        return f"guide:{prefix}"
    q = _qualifier(text, pos)
    if prefix == "D":
        return "guide:D" if q == "guide" else "decisions:D"
    if prefix == "L":
        return "guide:L" if q == "guide" else None
    if q == "guide":
        return "guide:T"
    if q == "matrix" or is_test or number > GUIDE_T_MAX:
        return "spec:T"
    return "guide:T"


@dataclass
class _Hit:
    start: int
    end: int
    family: str
    prefix: str
    number: int
    suffix: str
    ident: str


def _is_quoted_literal(text: str, start: int, end: int) -> bool:
    """`"B2"`: a string literal that is exactly an id-shaped word is data, not a citation."""
    return start > 0 and end < len(text) and text[start - 1] in "\"'" and text[end] in "\"'"


def _spec_hits(text: str, m: re.Match[str], prefix: str) -> list[_Hit]:
    """A spec-shaped match plus its continuations: "RCACHE-3, -5" and "RCACHE-7d/e"."""
    number, suffix, pos = m.group(1), m.group(2), m.end()
    hits = [_Hit(m.start(), pos, f"spec:{prefix}", prefix, int(number), suffix, f"{prefix}-{number}{suffix}")]
    while True:
        if suffix and (cont := _LETTER_CONTINUATION.match(text, pos)):
            suffix = cont.group(1)
        elif cont := _CONTINUATION.match(text, pos):
            number, suffix = cont.group(1), cont.group(2)
        else:
            return hits
        pos = cont.end()
        ident = f"{prefix}-{number}{suffix}"
        hits.append(_Hit(cont.start(), pos, f"spec:{prefix}", prefix, int(number), suffix, ident))


def find_citations(text: str, path: str = "<text>") -> list[Citation]:
    """Every design id cited in `text`, as written, with ranges ("CMD-1 … CMD-18", "O2–O5") expanded.

    `path` is the repository-relative module path; a path under tests/ marks a test module, which
    matters only for unqualified T1..T5 (see `_classify`)."""
    text = _blank_urls(text)
    is_test = is_test_path(path)
    hits: list[_Hit] = []
    for prefix, regex in SPEC_RES.items():
        for m in regex.finditer(text):
            if not _is_quoted_literal(text, m.start(), m.end()):
                hits.extend(_spec_hits(text, m, prefix))
    for prefix, regex in GUIDE_RES.items():
        for m in regex.finditer(text):
            if _is_quoted_literal(text, m.start(), m.end()):
                continue
            number = int(m.group(1))
            fam = _classify(prefix, number, text, m.start(), is_test)
            if fam is not None:
                hits.append(_Hit(m.start(), m.end(), fam, prefix, number, "", f"{prefix}{number}"))
    for m in METRIC_RE.finditer(text):
        if not _is_quoted_literal(text, m.start(), m.end()) and int(m.group(1)) <= METRIC_MAX:
            hits.append(_Hit(m.start(), m.end(), "spec:M", "M", int(m.group(1)), "", f"M{m.group(1)}"))
    for m in DRILL_RE.finditer(text):
        if not _is_quoted_literal(text, m.start(), m.end()) and 1 <= int(m.group(1)) <= DRILL_MAX:
            hits.append(_Hit(m.start(), m.end(), "spec:drill", "drill", int(m.group(1)), "", f"drill {m.group(1)}"))
    for fam, regex, label in (("spec:§", SPEC_SECTION_RE, "spec"),
                              ("guide:§", GUIDE_SECTION_RE, "consistency-techniques")):
        for m in regex.finditer(text):
            numbers = [m.group(1), *re.findall(r"\d+(?:\.\d+)*", m.group(2))]
            for num in numbers:
                hits.append(_Hit(m.start(), m.end(), fam, "§", 0, "", f"{label} §{num}"))
    hits.sort(key=lambda h: (h.start, h.end))
    out: list[Citation] = []

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    for i, hit in enumerate(hits):
        out.append(Citation(hit.family, hit.ident, path, line_of(hit.start)))
        nxt = hits[i + 1] if i + 1 < len(hits) else None
        if (nxt and hit.prefix != "§" and nxt.family == hit.family and nxt.prefix == hit.prefix
                and not hit.suffix and not nxt.suffix and hit.number < nxt.number <= hit.number + MAX_RANGE
                and _RANGE_GAP.fullmatch(text, hit.end, nxt.start)):
            sep = "-" if hit.prefix in SPEC_PREFIXES else ""
            for n in range(hit.number + 1, nxt.number):
                out.append(Citation(hit.family, f"{hit.prefix}{sep}{n}", path, line_of(hit.start)))
    return out


def scan(root: Path = ROOT) -> list[Citation]:
    """Citations in the repository's Python source (SCAN_DIRS), skipping SKIP_DIRS and SELF."""
    found: list[Citation] = []
    for top in SCAN_DIRS:
        base = root / top
        if not base.is_dir():
            continue
        for file in sorted(base.rglob("*.py")):
            rel = file.relative_to(root)
            if SKIP_DIRS.intersection(rel.parts) or rel.as_posix() in SELF:
                continue
            found.extend(find_citations(file.read_text(encoding="utf-8", errors="replace"), rel.as_posix()))
    return found


def cited_ids(citations: list[Citation], *, checked_only: bool = True) -> set[tuple[str, str]]:
    return {(c.family, c.id) for c in citations if not checked_only or family_of(c.family).checked}
