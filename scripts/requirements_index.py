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
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the reqindex package beside this script

from reqindex.citations import DESIGN_ENV, DOC, ROOT, cited_ids, find_citations, scan
from reqindex.definitions import design_dir_default, load_definitions, natural_key
from reqindex.doc import doc_ids, family_sort, missing_from_doc, render

# What the test module and other callers use from here.
__all__ = ["design_dir_default", "find_citations", "load_definitions", "main", "missing_from_doc", "render", "scan"]


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
        for fam, ident in sorted(in_code - in_doc, key=lambda i: (family_sort(i[0]), natural_key(i[1]))):
            paths = sorted({c.path for c in citations if (c.family, c.id) == (fam, ident)})
            print(f"cited but not in the doc: {ident} ({fam}) in {', '.join(paths)}", file=sys.stderr)
        for fam, ident in sorted(in_doc - in_code, key=lambda i: (family_sort(i[0]), natural_key(i[1]))):
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
    print(f"wrote {doc}: " + ", ".join(f"{f} {n}" for f, n in sorted(counts.items(), key=lambda i: family_sort(i[0]))))
    for fam, ident, paths in undefined:
        print(f"not defined in the design: {ident} ({fam}) cited in {', '.join(sorted(paths))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
