"""Each id's one-line definition, read from the shared design (spec.md, consistency-techniques.md)
and docs/decisions.md."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .citations import DESIGN_ENV, ROOT

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
        elif m := re.match(r"^- (M\d+) (.*)$", line):  # §8's metric list
            current = None
            defs.texts[("spec:M", m.group(1))] = shorten(m.group(2), 130)
            defs.titles["spec:M"] = f"{section} {defs.spec_headings.get(section, '')}".strip()
        elif section == "7" and (m := re.match(r"^(\d+)\. (.*)$", line)):  # §7's fault drills
            current = None
            defs.texts[("spec:drill", f"drill {m.group(1)}")] = shorten(m.group(2), 130)
            defs.titles["spec:drill"] = f"{section} {defs.spec_headings.get(section, '')}".strip()
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
