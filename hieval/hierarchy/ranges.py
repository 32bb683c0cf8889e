"""The ICD-9-CM v32 chapter and block ranges that place a category at levels ``c`` and ``chapter``.

The CMS code lists only hold leaf codes; the blocks (360-379) and chapters (320-389) above the
categories live in ``hieval/data/icd9_ranges.tsv``, hand-checked against the v32 tabular list.
A chapter with no blocks (280-289, 740-759) is its own block. Where the tabular list nests a
section inside another (Kaposi's sarcoma, 176, inside 170-176), the narrowest range that holds a
category is its block.

Procedures (volume 3) are split by their own 18 chapters (00, 01-05, 06-07, ..., 17 "3A", ...,
87-99), as the tabular list does; a chapter has no blocks, so each is its own block. The
codes' level ``c`` is the same as when the 18 were blocks of one ``00-99`` chapter (the CoPHE
graph's layout), so CoPHE numbers up to ``c`` (the ICD-9 default ``max_level``) are unchanged;
at ``chapter`` procedures are now counted per chapter, no longer as one node.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources

from hieval.codes.icd9 import DX, PROC


def category_key(category: str) -> tuple[str, int]:
    """Order categories within their letter class: numeric, V and E are separate sequences."""
    if category[0] in "VE":
        return category[0], int(category[1:])
    return "", int(category)


@dataclass(frozen=True)
class Range:
    """One chapter or block: its kind, level, bounds, written code and title."""

    kind: str
    level: str
    first: str
    last: str
    code: str
    title: str

    def contains(self, kind: str, category: str) -> bool:
        """True when ``category`` of ``kind`` lies within this range."""
        if kind != self.kind:
            return False
        key, lo, hi = category_key(category), category_key(self.first), category_key(self.last)
        return key[0] == lo[0] and lo[1] <= key[1] <= hi[1]


@dataclass(frozen=True)
class Placement:
    """Where a category sits: its lowest block and its chapter."""

    c: Range
    chapter: Range


class RangeTable:
    """Look up the block and chapter of a category."""

    def __init__(self, ranges: list[Range]):
        self.ranges = ranges
        self.chapters = [r for r in ranges if r.level == "chapter"]
        self.blocks = [r for r in ranges if r.level == "c"]

    @functools.cache  # noqa: B019 - one table per process, bounded by categories
    def place(self, kind: str, category: str) -> Placement | None:
        """The block and chapter holding ``category``, or None when no chapter holds it."""
        chapter = next((r for r in self.chapters if r.contains(kind, category)), None)
        if chapter is None:
            return None
        blocks = [r for r in self.blocks if r.contains(kind, category)]
        block = min(
            blocks,
            key=lambda r: category_key(r.last)[1] - category_key(r.first)[1],
            default=chapter,
        )
        return Placement(block, chapter)


@functools.cache
def icd9_ranges() -> RangeTable:
    """The range table shipped with hieval."""
    text = resources.files("hieval.data").joinpath("icd9_ranges.tsv").read_text("utf-8")
    rows = csv.DictReader(text.splitlines(), delimiter="\t")
    ranges = [Range(**row) for row in rows]
    assert {r.kind for r in ranges} <= {DX, PROC}
    return RangeTable(ranges)
