"""Per code: counts and P/R/F1 of every code of the gold or the predictions and of every
ancestor node up to ``max_level``, so that a user can sort by support and find the rare codes a
model never gets.

A node at level L is in a document's gold (or predictions) when a gold (predicted) code of the
document is the node or lies below it: the set-based view, one count per document and node.
These are the count engine's ``set`` rows of the model's ``nodes.parquet`` exactly, so the table
is read from them rather than recounted from every document (at 100x MIMIC-III a recount took
40 s and several GB; reading the engine's rows takes a fraction of a second). A code placed
nowhere (a generative coder's invented or malformed code, ``unknown_codes: count`` /
``malformed_codes: count``) has no node at any level: it is a false positive at the leaf only,
and gets the engine's ``flat`` row at the pseudo-level ``leaf``.
"""

from __future__ import annotations

import polars as pl

from hieval.analysis.tree import Tree, labels_of
from hieval.engine.keys import LEAF
from hieval.metrics.count_measures import PRF_MEASURES

COLUMNS = ("code", "title", "level", "support", "tp", "fp", "fn", "precision", "recall", "f1")


def node_labels(labels: pl.DataFrame, tree: Tree, levels: tuple[str, ...]) -> pl.DataFrame:
    """``doc_id, level, code``: the nodes at ``levels`` a label table's documents carry (each
    once per document)."""
    return (
        labels_of(labels)
        .join(
            tree.ancestors.filter(pl.col("level").is_in(levels)), on="code", maintain_order="none"
        )
        .select("doc_id", "level", pl.col("ancestor").alias("code"))
        .unique()
    )


def node_counts(nodes: pl.DataFrame, *, counted: tuple[str, ...] = ()) -> pl.DataFrame:
    """``level, code, tp, fp, fn`` of every node the gold or the predictions reach: the engine's
    set-based rows (``nodes.parquet``), and the ``leaf`` rows of the ``counted`` codes."""
    placed_nowhere = (pl.col("family") == "flat") & pl.col("node").is_in(
        pl.Series(counted, dtype=pl.String).implode()
    )
    return nodes.filter((pl.col("family") == "set") | placed_nowhere).select(
        "level", pl.col("node").alias("code"), "tp", "fp", "fn"
    )


def code_table(
    counts: pl.DataFrame,
    tree: Tree,
    *,
    levels: tuple[str, ...],
    train_gold: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """``code, title, level, support, tp, fp, fn, precision, recall, f1`` (and
    ``train_frequency``, the training documents carrying the node, with ``train_gold``) from
    :func:`node_counts`; ``support`` is the gold documents (TP + FN). Rows by level (deepest
    first, the counted codes' ``leaf`` rows last), then code."""
    tp, fp, fn = pl.col("tp"), pl.col("fp"), pl.col("fn")
    table = counts.with_columns(
        (tp + fn).alias("support"),
        *(formula(tp, fp, fn).alias(name) for name, formula in PRF_MEASURES.items()),
    ).join(tree.titles, on="code", how="left", maintain_order="none")  # sorted below
    columns = list(COLUMNS)
    if train_gold is not None:
        frequency = (
            node_labels(train_gold, tree, levels)
            .group_by("level", "code")
            .agg(pl.len().cast(pl.Int64).alias("train_frequency"))
        )
        table = table.join(
            frequency, on=["level", "code"], how="left", maintain_order="none"
        ).with_columns(pl.col("train_frequency").fill_null(0))
        columns.append("train_frequency")
    order = {level: i for i, level in enumerate((*tree.levels, LEAF))}
    return table.sort(pl.col("level").replace_strict(order), "code").select(columns)
