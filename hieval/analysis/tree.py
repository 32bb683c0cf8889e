"""The hierarchy as error analysis reads it: the ancestors of the codes a run holds, placed codes
included, with each code's status and the order of the levels.

Error distance, confusions and per-code counts all ask one question of the tree — at which
level do two codes, or a code and a node, meet — so they share this one view of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from hieval import codesystem
from hieval.hierarchy.table import LevelTable
from hieval.inputs.counted import INVALID, UNKNOWN

#: The status of a label's code: in the release, placed by ICD syntax though not in the release,
#: not in the release and placed nowhere (``unknown_codes: count``: a generative coder's
#: invented code, a false positive at the leaf level only), or not a code at all
#: (``malformed_codes: count``). ``unknown`` is a value of its own because ``placed`` codes
#: earn partial credit at the levels above and these earn none: the two must not be summed.
VALID, PLACED = "valid", "placed"
CODE_STATUSES = (VALID, PLACED, UNKNOWN, INVALID)
#: The LCA level of an error whose document has no error on the other side at all.
NONE = "none"
ROOT = "root"
#: The level of near misses, per code system: a confusion is kept when its two codes meet here
#: or deeper.
CATEGORY_LEVELS = {"icd9": "e0", "icd10": "category"}


@dataclass(frozen=True)
class Tree:
    """``ancestors`` (``code, level, ancestor``, root rows left out: every two codes meet there)
    of every code of ``codes`` and the codes' statuses; ``levels`` deepest first, ending with
    ``root``; ``category`` the level at or below which two codes are a near miss."""

    ancestors: pl.DataFrame
    statuses: pl.DataFrame
    titles: pl.DataFrame
    levels: tuple[str, ...]
    category: str

    def rank(self, level: str) -> int:
        """The position of ``level`` from the deepest (``none`` after ``root``)."""
        return (*self.levels, NONE).index(level)

    @property
    def lca_levels(self) -> tuple[str, ...]:
        """Every value of an ``lca_level`` column, in order: the levels, then ``none``."""
        return (*self.levels, NONE)


def category_level(table: LevelTable) -> str:
    """The near-miss level of ``table``: its code system's category, or for a user's tree the
    parent level of its deepest nodes (siblings are near misses; a user's levels carry no
    meaning hieval could read a "category" from), or the deepest level of a one-level tree."""
    system = codesystem.of_table(table).name
    if system in CATEGORY_LEVELS and CATEGORY_LEVELS[system] in table.levels:
        return CATEGORY_LEVELS[system]
    return table.levels[1] if len(table.levels) > 2 else table.levels[0]


def tree_of(
    table: LevelTable,
    ancestors: pl.DataFrame,
    codes: pl.Series,
    counted: dict[str, str] | None = None,
) -> Tree:
    """The :class:`Tree` of ``codes`` (every code of the labels analysed): their rows of the
    hierarchy's ``ancestors`` table, and rows placed by syntax for codes the release lacks
    (normalisation kept them only under ``unknown_codes: place``). ``counted`` (code -> status,
    :func:`hieval.inputs.counted.counted_statuses`) are the predictions' codes placed nowhere:
    no ancestor rows, so they meet every other code at the root only."""
    counted = counted or {}
    codes = codes.drop_nulls().unique()
    known = table.frame.select("code")
    unknown = codes.filter(
        ~codes.is_in(known["code"].implode())
        & ~codes.is_in(pl.Series(list(counted), dtype=pl.String).implode())
    )
    rows = ancestors.filter(pl.col("code").is_in(codes.implode()))
    if unknown.len():
        placed = codesystem.of_table(table).placed_ancestors(unknown.to_list(), table)
        rows = pl.concat([rows, placed.filter(pl.col("code").is_in(unknown.implode()))])
    statuses = pl.DataFrame({"code": codes}).with_columns(
        pl.when(pl.col("code").is_in(unknown.implode()))
        .then(pl.lit(PLACED))
        .otherwise(pl.col("code").replace_strict(counted, default=VALID, return_dtype=pl.String))
        .alias("code_status")
    )
    titles = table.frame.select("code", pl.col("title").cast(pl.String))
    return Tree(
        ancestors=rows.filter(pl.col("level") != ROOT).select("code", "level", "ancestor"),
        statuses=statuses,
        titles=titles,
        levels=table.levels,
        category=category_level(table),
    )


def labels_of(frame: pl.DataFrame) -> pl.DataFrame:
    """The distinct ``doc_id, code`` pairs of a normalised label table (a document's empty row,
    code null, declares the document and is no label)."""
    return frame.select("doc_id", "code").drop_nulls().unique()
