"""Confusions: which gold code a model misses for which wrong code, among the near misses.

A pair is a missed gold code and a wrong predicted code of the same document that meet at the
category level or deeper (:data:`hieval.analysis.tree.CATEGORY_LEVELS`); further apart, a
"confusion" is rarely one, and the table would be the product of every document's errors.
"""

from __future__ import annotations

import polars as pl

from hieval.analysis.errors import error_pairs, errors_of
from hieval.analysis.tree import Tree

COLUMNS = ("gold_code", "predicted_code", "lca_level", "documents")


def confusions(gold: pl.DataFrame, predicted: pl.DataFrame, tree: Tree) -> pl.DataFrame:
    """``gold_code, predicted_code, lca_level, documents``: each near-miss pair and the number
    of documents it occurs in, most frequent first (then by the codes)."""
    missed, extra = errors_of(gold, predicted)
    pairs = error_pairs(missed, extra, tree).filter(pl.col("lca_rank") <= tree.rank(tree.category))
    level_of = dict(enumerate(tree.levels))
    return (
        pairs.group_by("gold_code", "predicted_code")
        .agg(pl.col("lca_rank").first(), pl.len().alias("documents"))
        .with_columns(
            pl.col("lca_rank").replace_strict(level_of, return_dtype=pl.String).alias("lca_level"),
            pl.col("documents").cast(pl.Int64),
        )
        .sort(["documents", "gold_code", "predicted_code"], descending=[True, False, False])
        .select(COLUMNS)
    )
