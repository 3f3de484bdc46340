#!/usr/bin/env python3
"""Index of the design ids the code cites, written to docs/requirements.md.

The code cites requirement ids from the shared design's spec.md (CMD-12, RCACHE-7d, INV-3, E-13,
test-matrix rows T7, "spec §8.6") and technique ids from its consistency-techniques.md (O3, C5,
K1, T4). Neither file is in this repository, so this script scans the Python source for citations,
reads each id's one-line definition from the design, and writes one table per id family:
`| id | requirement | implemented in | tested in |`. Ids the code cites but the design does not
define are printed and listed in their own section, never invented.

    python scripts/requirements_index.py            # regenerate docs/requirements.md
    python scripts/requirements_index.py --check    # exit 1 when the doc's ids differ from the code's

`--check` compares only the set of cited ids with the ids in the doc's tables, not the location
columns, so a refactor that moves a citation does not make the doc stale. It does not need the
shared design: finding and classifying citations needs only the source text.

The design folder is `../shared/design` relative to the repository root; override it with
`--design-dir DIR` or the environment variable REQUIREMENTS_DESIGN_DIR.
Dependency-free (standard library only), Python 3.11.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = Path("docs/requirements.md")
DESIGN_ENV = "REQUIREMENTS_DESIGN_DIR"
SCAN_DIRS = ("likes_project", "relations", "counting", "reconciliation", "opsconsole", "tests", "bench", "scripts")
SKIP_DIRS = {".venv", ".data", "__pycache__", ".git", ".hypothesis", ".ruff_cache"}
# This script and its test quote ids as examples and counter-examples, not as citations.
SELF = {"scripts/requirements_index.py", "tests/test_requirements_index.py"}

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


def _family(key: str) -> Family:
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
    return {(c.family, c.id) for c in citations if not checked_only or _family(c.family).checked}


# --- the design's definitions ---------------------------------------------------------------------


@dataclass
class Definitions:
    texts: dict[tuple[str, str], str] = field(default_factory=dict)  # (family, id) -> one-liner
    subitems: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # parent -> letter -> text
    titles: dict[str, str] = field(default_factory=dict)  # family key -> heading
    spec_headings: dict[str, str] = field(default_factory=dict)  # "4.13" -> title
    spec_source_sections: dict[str, list[str]] = field(default_factory=dict)  # "8.6" -> ["DEG-1"]
    guide_headings: dict[str, str] = field(default_factory=dict)

    def lookup(self, family: str, ident: str) -> str | None:
        """The one-liner for an id, or None when the design does not define it."""
        if (family, ident) in self.texts:
            return self.texts[(family, ident)]
        if family == "spec:§":
            num = ident.split("§", 1)[1]
            if num in self.spec_headings:
                return f"spec.md section {num}: {self.spec_headings[num]}"
            if num in self.spec_source_sections:
                ids = ", ".join(sorted(set(self.spec_source_sections[num]), key=natural_key))
                return f"source-document §{num}, restated in spec.md as {ids}"
            return None
        if family == "guide:§":
            num = ident.split("§", 1)[1]
            return f"section {num}: {self.guide_headings[num]}" if num in self.guide_headings else None
        m = re.fullmatch(r"([A-Z]+-\d+)([a-z])", ident)
        if m and family.startswith("spec:"):
            parent = (family, m.group(1))
            letter_text = self.subitems.get(parent, {}).get(m.group(2))
            if letter_text is not None:
                return shorten(f"Item ({m.group(2)}) of {m.group(1)}: {letter_text}", 130)
        return None


_SOURCE_TAG = re.compile(r"\s*\[§[^\]]*\]")


def shorten(text: str, limit: int = 110) -> str:
    """A table-safe one-liner: markdown emphasis, code marks and source tags removed, the first
    sentence kept, cut at a word boundary."""
    text = _SOURCE_TAG.sub("", text)
    text = text.replace("**", "").replace("`", "")
    text = re.sub(r"\s+", " ", text).strip()
    m = re.search(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)[.!?](?=\s)", text)
    if m:
        text = text[: m.start()]
    text = text.rstrip(" .:;,")
    if len(text) > limit:
        cut = text[: limit - 1]
        text = (cut[: cut.rfind(" ")] if " " in cut else cut).rstrip(" ,;:(") + " …"
    return text.replace("|", "\\|")


def natural_key(ident: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", ident))


def parse_spec(text: str, defs: Definitions) -> None:
    lines = text.splitlines()
    current: tuple[str, str] | None = None  # the requirement whose block we are in
    section = ""
    for line in lines:
        if h := re.match(r"^#{2,3} (\d+(?:\.\d+)?)\.? (.*)$", line):
            section = h.group(1)
            title = _SOURCE_TAG.sub("", h.group(2)).strip()
            defs.spec_headings[section] = title
            if p := re.search(r"\(([A-Z]+)\)$", title):
                defs.titles[f"spec:{p.group(1)}"] = f"{section} {title}"
            current = None
            continue
        if line.startswith("#"):
            current = None
            continue
        if m := re.match(r"^- \*\*([A-Z]+-\d+)\*\*\s*(.*)$", line):
            ident = m.group(1)
            prefix = ident.split("-")[0]
            current = (f"spec:{prefix}", ident)
            defs.texts[current] = shorten(m.group(2))
        elif m := re.match(r"^\*\*(E-\d+) ([^*]+)\*\*\s*(.*)$", line):
            ident = m.group(1)
            current = ("spec:E", ident)
            desc = _SOURCE_TAG.sub("", m.group(3)).strip().lstrip("—").strip()
            defs.texts[current] = shorten(f"{m.group(2).strip()} — {desc}" if desc else m.group(2).strip())
            defs.titles.setdefault("spec:E", f"{section} {defs.spec_headings.get(section, '')}".strip())
        elif m := re.match(r"^\| T(\d+) \| (.*?) \| (.*?) \| .*\|$", line):
            ident = f"T{m.group(1)}"
            current = None
            defs.texts[("spec:T", ident)] = shorten(f"{m.group(2)} → {m.group(3)}", 130)
            defs.titles["spec:T"] = f"{section} {defs.spec_headings.get(section, '')}".strip()
        elif current is not None:
            if s := re.match(r"^\s+- \(([a-z])\)\s+(.*)$", line):
                defs.subitems.setdefault(current, {})[s.group(1)] = s.group(2)
            elif (current[1].startswith("E-") and " — " not in defs.texts[current]
                  and (b := re.match(r"^- (.*)$", line))):  # an entity without a description: its first field
                defs.texts[current] = shorten(f"{defs.texts[current]} — {b.group(1)}")
        if current is not None:
            if current[0] == "spec:INV":
                defs.titles.setdefault("spec:INV", f"{section} {defs.spec_headings.get(section, '')}".strip())
            for tag in re.findall(r"\[§([^\]]*)\]", line):
                for num in re.findall(r"§?(\d+(?:\.\d+)*)", tag):
                    defs.spec_source_sections.setdefault(num, []).append(current[1])


def parse_guide(text: str, defs: Definitions) -> None:
    heading = ""
    for line in text.splitlines():
        if h := re.match(r"^## (\d+)\. (.*)$", line):
            heading = f"{h.group(1)}. {h.group(2).strip()}"
            defs.guide_headings[h.group(1)] = h.group(2).strip()
            continue
        if m := re.match(r"^- \*\*(RC|[A-Z])(\d+) (.+?)\*\*", line):
            prefix, ident = m.group(1), f"{m.group(1)}{m.group(2)}"
            defs.texts[(f"guide:{prefix}", ident)] = shorten(m.group(3))
            defs.titles.setdefault(f"guide:{prefix}", heading)


def parse_decisions(text: str, defs: Definitions) -> None:
    for line in text.splitlines():
        if m := re.match(r"^## (D\d+)\. (.*)$", line):
            defs.texts[("decisions:D", m.group(1))] = shorten(m.group(2))
    defs.titles["decisions:D"] = "decisions"


def load_definitions(design_dir: Path, root: Path = ROOT) -> Definitions:
    defs = Definitions()
    parse_spec((design_dir / "spec.md").read_text(encoding="utf-8"), defs)
    parse_guide((design_dir / "consistency-techniques.md").read_text(encoding="utf-8"), defs)
    decisions = root / "docs" / "decisions.md"
    if decisions.is_file():
        parse_decisions(decisions.read_text(encoding="utf-8"), defs)
    return defs


def design_dir_default(root: Path = ROOT) -> Path:
    return Path(os.environ.get(DESIGN_ENV) or (root.parent / "shared" / "design"))


# --- the doc -----------------------------------------------------------------------------------------

FAMILY_MARK = re.compile(r"^<!-- family: (\S+) -->$")
UNDEFINED_MARK = "<!-- undefined -->"
_SPEC_ORDER = {p: i for i, p in enumerate(("INV", "E", *SPEC_PREFIXES[:-2], "T", "§"))}
_GUIDE_ORDER = {p: i for i, p in enumerate((*GUIDE_PREFIXES, "§"))}
_FILES = {"spec": "spec.md", "guide": "consistency-techniques.md", "decisions": "docs/decisions.md"}

HEADER = """\
# Requirement index

Generated by `scripts/requirements_index.py` from the ids the Python source cites; do not edit by hand.
Regenerate: `.venv/bin/python scripts/requirements_index.py`.
Check: `.venv/bin/python scripts/requirements_index.py --check` (exit 1 when the ids the code cites
differ from the ids in this file; the location columns are not compared).
The requirement texts themselves are in the shared design's `spec.md` and `consistency-techniques.md`
(`../shared/design/`); the one-liners here are shortened summaries, not the requirements.
"""

RULES = f"""\
## How citations are found

- Scanned: the Python source under
  {", ".join(f"`{d}/`" for d in SCAN_DIRS)}
  (not `.venv`, `.data`; the index's own script and test are skipped, since they quote ids as
  examples). "Implemented in" lists modules outside `tests/`, "tested in" modules under `tests/`.
- One regex per id shape: `PREFIX-n` for spec.md's families (`CMD-12`, `INV-3`, `E-13`), `Xn` for the
  guide's (`O3`, `RC4`) and spec.md's test-matrix rows (`T7`), `spec §x.y` and
  `consistency-techniques §n` for sections. An id is a whole word, not part of a path, URL, version,
  percent-escape or hyphenated word: `UTF-8`, `sha256-be64`, `E-mail`, `T-shirt`, `T0`, `caf%C3%A9`
  and ids inside URLs are not citations, nor is a string literal that is exactly an id (`"B2"`).
- Ranges are expanded: `CMD-1 … CMD-18`, `O2–O5`, `T1-T4` cite every id from one end to the other;
  `RCACHE-3, -5` cites RCACHE-5 and `RCACHE-7d/e` cites RCACHE-7e.
- A sub-id such as `RCACHE-7d` is its own row. It is defined when spec.md's RCACHE-7 has a lettered
  item (d); a parent without lettered items defines no sub-ids.
- **T<n>** names spec.md's test-matrix rows (T1..T34) and the guide's transaction-boundary
  techniques (T1..T{GUIDE_T_MAX}). A qualifier in the same clause decides: "consistency-techniques T4"
  is the technique, "test-matrix rows T6 and T7" are matrix rows. Unqualified, T{GUIDE_T_MAX + 1} and
  above are matrix rows (the guide has no such technique), and T1..T{GUIDE_T_MAX} are matrix rows in
  test modules (tests exercise the matrix) but techniques in application modules (code applies
  techniques): `relations/tasks.py`'s "(T2)" is the guide's sweeper rule, while
  `tests/relations/test_command.py`'s "T2" is the matrix row.
- **D<n>** is a decision of `docs/decisions.md` unless qualified by "consistency-techniques" (then the
  guide's D1/D2). **L<n>** is a technique only when qualified; a bare "L1" is the in-process cache.
- `spec §x.y` resolves to spec.md's own heading x.y when it has one (`spec §4.13`), else to the
  requirements spec.md tags with the source document's `[§x.y]` (`spec §8.6` → DEG-1).
"""


def _family_sort(key: str) -> tuple:
    fam = _family(key)
    inner = _SPEC_ORDER if fam.source == "spec" else _GUIDE_ORDER
    return ({"spec": 0, "guide": 1, "decisions": 2}[fam.source], inner.get(fam.prefix, 99), fam.prefix)


def _family_title(key: str, defs: Definitions) -> str:
    """`CMD — 4.2 Like command (spec.md)`."""
    fam = _family(key)
    names = {"spec:T": "T (test-matrix rows)", "spec:§": "spec §", "guide:§": "consistency-techniques §",
             "decisions:D": "D"}
    title = re.sub(r"\s*\([A-Z]+\)$", "", defs.titles.get(key, ""))
    if fam.source == "guide" and title:
        title = "§" + title
    if key in {"spec:§", "guide:§"}:
        title = "sections"
    head = names.get(key, fam.prefix)
    return f"{head} — {title} ({_FILES[fam.source]})" if title else f"{head} ({_FILES[fam.source]})"


def _cell(paths: set[str]) -> str:
    return ", ".join(f"`{p}`" for p in sorted(paths)) or "—"


def render(citations: list[Citation], defs: Definitions) -> tuple[str, list[tuple[str, str, set[str]]]]:
    """The doc's text, and the undefined ids as (family, id, citing paths)."""
    guide_t = [int(i[1:]) for (f, i) in defs.texts if f == "guide:T"]
    if guide_t and max(guide_t) != GUIDE_T_MAX:
        raise SystemExit(f"consistency-techniques.md now defines T1..T{max(guide_t)}: update GUIDE_T_MAX "
                         "and the T<n> rule")
    where: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: {"impl": set(), "test": set()})
    for c in citations:
        where[(c.family, c.id)]["test" if is_test_path(c.path) else "impl"].add(c.path)
    by_family: dict[str, list[str]] = defaultdict(list)
    undefined: list[tuple[str, str, set[str]]] = []
    for (fam, ident), locs in where.items():
        if defs.lookup(fam, ident) is None:
            undefined.append((fam, ident, locs["impl"] | locs["test"]))
        else:
            by_family[fam].append(ident)
    undefined.sort(key=lambda u: (_family_sort(u[0]), natural_key(u[1])))
    cited_families = {f for f, _ in where}
    defined: dict[str, int] = defaultdict(int)
    for fam, _ in defs.texts:
        defined[fam] += 1
    families = sorted(cited_families | set(defined), key=_family_sort)

    out = [HEADER, RULES, "## Summary", "",
           "Ids per family: defined in the design, cited by the code (sub-ids and sections count as cited "
           "ids), and cited but undefined.", "",
           "| family | defined | cited | undefined |", "|---|---|---|---|"]
    for fam in families:
        n_cited = sum(1 for f, _ in where if f == fam)
        n_undef = n_cited - len(by_family.get(fam, []))
        note = " (listed, not checked)" if not _family(fam).checked else ""
        n_def = defined.get(fam, 0) if fam not in {"spec:§", "guide:§"} else "—"
        out.append(f"| {_family_title(fam, defs)}{note} | {n_def} | {n_cited} | {n_undef} |")
    out += ["", "## Cited but not defined in the design", "",
            "Ids the code cites that spec.md and consistency-techniques.md (for decisions: docs/decisions.md) "
            "do not define. Fix the citation or the design; nothing is invented for them here.", "",
            UNDEFINED_MARK, "| id | family | cited in |", "|---|---|---|"]
    out += [f"| {ident} | `{fam}` | {_cell(paths)} |" for fam, ident, paths in undefined]
    if not undefined:
        out.append("| — | — | none |")
    sections = {"spec": "## Requirements (spec.md)", "guide": "## Consistency techniques (consistency-techniques.md)",
                "decisions": "## Decisions (docs/decisions.md: listed for navigation, not checked)"}
    seen_source = None
    for fam in families:
        if not by_family.get(fam):
            continue
        source = _family(fam).source
        if source != seen_source:
            out += ["", sections[source]]
            seen_source = source
        out += ["", f"### {_family_title(fam, defs)}", "", f"<!-- family: {fam} -->",
                "| id | requirement (one line, shortened from the design) | implemented in | tested in |",
                "|---|---|---|---|"]
        for ident in sorted(by_family[fam], key=natural_key):
            locs = where[(fam, ident)]
            out.append(f"| {ident} | {defs.lookup(fam, ident)} | {_cell(locs['impl'])} | {_cell(locs['test'])} |")
    return "\n".join(out) + "\n", undefined


def doc_ids(text: str, *, checked_only: bool = True) -> set[tuple[str, str]]:
    """(family, id) pairs in the doc: the first column of each family table and of the undefined table."""
    ids: set[tuple[str, str]] = set()
    family: str | None = None
    undefined = False
    for line in text.splitlines():
        if m := FAMILY_MARK.match(line):
            family, undefined = m.group(1), False
            continue
        if line == UNDEFINED_MARK:
            family, undefined = None, True
            continue
        if not line.startswith("|"):
            if line.strip():
                family, undefined = None, False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in {"id", "—"} or set(cells[0]) <= {"-"}:
            continue
        if undefined and len(cells) >= 2:
            ids.add((cells[1].strip("`"), cells[0]))
        elif family is not None:
            ids.add((family, cells[0]))
    return {i for i in ids if not checked_only or _family(i[0]).checked}


def missing_from_doc(citations: list[Citation], doc_text: str) -> set[tuple[str, str]]:
    """Checked ids the citations name that the doc does not list."""
    return cited_ids(citations) - doc_ids(doc_text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the doc's ids differ from the code's")
    parser.add_argument("--design-dir", type=Path,
                        help=f"the folder with spec.md (default: ${DESIGN_ENV}, else ../shared/design)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository root (default: this checkout)")
    parser.add_argument("--doc", type=Path, help="the doc to write or check (default docs/requirements.md)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    doc = args.doc or root / DOC
    citations = scan(root)

    if args.check:
        if not doc.is_file():
            print(f"{doc} does not exist; run scripts/requirements_index.py", file=sys.stderr)
            return 1
        in_doc, in_code = doc_ids(doc.read_text(encoding="utf-8")), cited_ids(citations)
        if in_doc == in_code:
            print(f"{doc.name} is up to date ({len(in_code)} ids)")
            return 0
        for fam, ident in sorted(in_code - in_doc, key=lambda i: (_family_sort(i[0]), natural_key(i[1]))):
            paths = sorted({c.path for c in citations if (c.family, c.id) == (fam, ident)})
            print(f"cited but not in the doc: {ident} ({fam}) in {', '.join(paths)}", file=sys.stderr)
        for fam, ident in sorted(in_doc - in_code, key=lambda i: (_family_sort(i[0]), natural_key(i[1]))):
            print(f"in the doc but no longer cited: {ident} ({fam})", file=sys.stderr)
        print("regenerate with: python scripts/requirements_index.py", file=sys.stderr)
        return 1

    design = args.design_dir or design_dir_default(root)
    if not (design / "spec.md").is_file() or not (design / "consistency-techniques.md").is_file():
        print(f"no spec.md / consistency-techniques.md in {design}; pass --design-dir or set {DESIGN_ENV}",
              file=sys.stderr)
        return 2
    text, undefined = render(citations, load_definitions(design, root))
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text, encoding="utf-8")
    counts: dict[str, int] = defaultdict(int)
    for fam, _ in {(c.family, c.id) for c in citations}:
        counts[fam] += 1
    print(f"wrote {doc}: " + ", ".join(f"{f} {n}" for f, n in sorted(counts.items(), key=lambda i: _family_sort(i[0]))))
    for fam, ident, paths in undefined:
        print(f"not defined in the design: {ident} ({fam}) cited in {', '.join(sorted(paths))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
