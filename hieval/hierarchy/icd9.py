"""Build ICD-9-CM level tables from leaf codes.

For CMS code lists, e1 and e0 come from the code itself (364.11 -> 364.1 -> 364); the block and
chapter come from the project's range table. The same function places codes that are missing
from the hierarchy where their syntax says (``unknown_codes: place``). The leaves' titles are
the code lists'; the categories and subcategories above them take theirs from a packaged
tabular list (:mod:`hieval.hierarchy.titles`), the blocks and chapters from the range table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import polars as pl

from hieval.codes.icd9 import ICD9_LEVELS, IcdCode
from hieval.errors import HierarchyError, preview
from hieval.hierarchy.ranges import RangeTable, icd9_ranges
from hieval.hierarchy.table import LevelTable

ROOT = "root"
RANGE = "range"
_COLUMNS = ("code", "kind", "depth", "e1", "e0", "c", "chapter", "title")


def icd9_nodes(
    leaves: Iterable[tuple[IcdCode, str | None]], ranges: RangeTable | None = None
) -> tuple[dict[str, dict], list[str]]:
    """Rows for the given leaves and every ancestor they imply; also the unplaceable codes.

    A code is unplaceable when no chapter of the range table holds its category.
    """
    ranges = ranges or icd9_ranges()
    nodes: dict[str, dict] = {}
    unplaced: list[str] = []

    def add(code, kind, depth, e1, e0, c, chapter, title, leaf=False):  # noqa: PLR0913 (a row)
        row = dict(zip(_COLUMNS, (code, kind, depth, e1, e0, c, chapter, title), strict=True))
        if leaf or code not in nodes:
            nodes[code] = row

    for ic, title in leaves:
        place = ranges.place(ic.kind, ic.category)
        if place is None:
            unplaced.append(ic.code)
            continue
        block, chapter = place.c.code, place.chapter.code
        add(ic.code, ic.kind, ic.depth, ic.e1, ic.category, block, chapter, title, leaf=True)
        if ic.depth == "e2":
            add(ic.e1, ic.kind, "e1", ic.e1, ic.category, block, chapter, None)
        if ic.depth != "e0":
            add(ic.category, ic.kind, "e0", None, ic.category, block, chapter, None)
        # A chapter without blocks is its own block: its row is at depth chapter with c = itself.
        if block != chapter:
            add(block, RANGE, "c", None, None, block, chapter, place.c.title)
        add(
            chapter,
            RANGE,
            "chapter",
            None,
            None,
            block if block == chapter else None,
            chapter,
            place.chapter.title,
        )
    return nodes, unplaced


def build_icd9_table(
    leaves: pl.DataFrame,
    source: str,
    ranges: RangeTable | None = None,
    titles: Mapping[str, str] | None = None,
) -> LevelTable:
    """Level table from canonical leaf codes (columns ``code, kind, title``); ``titles`` names
    the nodes above the leaves (code -> title) that the leaves' list leaves untitled."""
    pairs = (
        (IcdCode(code, kind), title)
        for code, kind, title in leaves.select("code", "kind", "title").iter_rows()
    )
    nodes, unplaced = icd9_nodes(pairs, ranges)
    for code, row in nodes.items():
        if row["title"] is None and titles and row["kind"] != RANGE:
            row["title"] = titles.get(code)
    if unplaced:
        raise HierarchyError(
            f"{len(unplaced)} codes of the {source} source fall in no ICD-9-CM chapter of the "
            f"range table: {preview(unplaced)}"
        )
    nodes[ROOT] = dict.fromkeys(_COLUMNS) | {
        "code": ROOT,
        "kind": RANGE,
        "depth": "root",
        "title": "ICD-9-CM",
    }
    frame = pl.DataFrame(list(nodes.values()), schema=dict.fromkeys(_COLUMNS, pl.String))
    return LevelTable(frame=frame, levels=ICD9_LEVELS, root=ROOT, source=source, code_system="icd9")
