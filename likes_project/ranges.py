"""Sets of small integers written as ranges ("0-255", "0-9,100-109"): the buckets of a bucket migration, the
logical slots of a relation slot move. One parser and one printer for both."""

from __future__ import annotations

from likes_project.errors import InvalidInput


def parse_ranges(raw: str, upper: int, *, what: str, code: str) -> list[int]:
    """"0-255", "3", "0-9,100-109" -> the sorted integers, each inside 0..upper-1; else InvalidInput(code)."""
    out: set[int] = set()
    for part in (raw or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not (lo.strip().isdigit() and (not sep or hi.strip().isdigit())):
            raise InvalidInput(f"{what.capitalize()} are given as ranges like 0-255 or 0-9,100-109; "
                               f"{part!r} is not one.", code=code)
        a, b = int(lo), int(hi) if sep else int(lo)
        if a > b or b >= upper:
            raise InvalidInput(f"{what[:-1] if what.endswith('s') else what} range {part!r} is not inside "
                               f"0-{upper - 1}.", code=code)
        out.update(range(a, b + 1))
    if not out:
        raise InvalidInput(f"No {what[:-1] if what.endswith('s') else what} is named.", code=code)
    return sorted(out)


def ranges_label(values: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    runs, start, prev = [], None, None
    for v in values:
        if start is None:
            start = prev = v
        elif v == prev + 1:
            prev = v
        else:
            runs.append((start, prev))
            start = prev = v
    if start is not None:
        runs.append((start, prev))
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)
