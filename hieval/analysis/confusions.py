"""Confusions: which gold code a model misses for which wrong code, among the near misses.

A pair is a missed gold code and a wrong predicted code of the same document that meet at the
category level or deeper (:data:`hieval.analysis.tree.CATEGORY_LEVELS`); further apart, a
"confusion" is rarely one, and the table would be the product of every document's errors.
"""

from __future__ import annotations

import polars as pl

from hieval.analysis.errors import ModelErrors, near_pairs
from hieval.analysis.tree import Tree

COLUMNS = ("gold_code", "predicted_code", "lca_level", "documents")


def confusions(errors: ModelErrors) -> pl.DataFrame:
    """``gold_code, predicted_code, lca_level, documents``: each near-miss pair and the number
    of documents it occurs in, most frequent first (then by the codes)."""
    return confusion_table([pair_counts(errors)], errors.tree)


def pair_counts(errors: ModelErrors) -> pl.DataFrame:
    """``gold_code, predicted_code`` (the codes), ``lca_rank`` and ``documents``: the near-miss
    pairs of a run of documents and the number of its documents each occurs in. The counts of
    runs of other documents add up (:func:`confusion_table`); the rank is the two codes' own."""
    tree = errors.tree
    if errors.compiled:  # counted in the kernel, as integers
        pairs = _compiled_counts(errors, tree.rank(tree.category))
    else:
        pairs = (
            near_pairs(errors, tree.rank(tree.category))
            .group_by("gold_code", "predicted_code")
            .agg(pl.col("lca_rank").first(), pl.len().alias("documents"))
        )
    codes = errors.space.codes
    return pairs.with_columns(
        codes.gather(pairs["gold_code"]).alias("gold_code"),
        codes.gather(pairs["predicted_code"]).alias("predicted_code"),
        pl.col("documents").cast(pl.Int64),
    )


def _compiled_counts(errors: ModelErrors, deepest: int) -> pl.DataFrame:
    """:func:`pair_counts`' integer columns from the compiled kernels: the pairs' keys, found
    with the nearest levels, counted as integers (at 100x MIMIC-III, 0.8M pairs counted
    without a frame of them or a group-by)."""
    from hieval.analysis import errors_compiled

    counted = errors_compiled.pair_counts(errors.near_pair_keys(deepest), errors.level_nodes())
    return pl.DataFrame(
        dict(zip(("gold_code", "predicted_code", "lca_rank", "documents"), counted, strict=True))
    )


def confusion_table(counts: list[pl.DataFrame], tree: Tree) -> pl.DataFrame:
    """The confusions of runs of documents apart (:func:`pair_counts` each), as one table."""
    level_of = dict(enumerate(tree.levels))
    pairs = pl.concat(counts) if len(counts) > 1 else counts[0]
    if len(counts) > 1:
        pairs = pairs.group_by("gold_code", "predicted_code").agg(
            pl.col("lca_rank").first(), pl.col("documents").sum()
        )
    return (
        pairs.with_columns(
            pl.col("lca_rank").replace_strict(level_of, return_dtype=pl.String).alias("lca_level"),
        )
        .sort(["documents", "gold_code", "predicted_code"], descending=[True, False, False])
        .select(COLUMNS)
    )
