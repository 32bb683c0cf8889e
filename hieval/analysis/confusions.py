"""Confusions: which gold code a model misses for which wrong code, among the near misses.

A pair is a missed gold code and a wrong predicted code of the same document that meet at the
category level or deeper (:data:`hieval.analysis.tree.CATEGORY_LEVELS`); further apart, a
"confusion" is rarely one, and the table would be the product of every document's errors.
"""

from __future__ import annotations

import polars as pl

from hieval.analysis.errors import ModelErrors, near_pairs

COLUMNS = ("gold_code", "predicted_code", "lca_level", "documents")


def confusions(errors: ModelErrors) -> pl.DataFrame:
    """``gold_code, predicted_code, lca_level, documents``: each near-miss pair and the number
    of documents it occurs in, most frequent first (then by the codes)."""
    tree = errors.tree
    level_of = dict(enumerate(tree.levels))
    pairs = (
        near_pairs(errors, tree.rank(tree.category))
        .group_by("gold_code", "predicted_code")
        .agg(pl.col("lca_rank").first(), pl.len().alias("documents"))
    )
    codes = errors.space.codes
    return (
        pairs.with_columns(
            codes.gather(pairs["gold_code"]).alias("gold_code"),
            codes.gather(pairs["predicted_code"]).alias("predicted_code"),
            pl.col("lca_rank").replace_strict(level_of, return_dtype=pl.String).alias("lca_level"),
            pl.col("documents").cast(pl.Int64),
        )
        .sort(["documents", "gold_code", "predicted_code"], descending=[True, False, False])
        .select(COLUMNS)
    )
