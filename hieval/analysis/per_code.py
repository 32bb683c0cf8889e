"""Per code: counts and P/R/F1 of every code of the gold or the predictions and of every
ancestor node up to ``max_level``, so that a user can sort by support and find the rare codes a
model never gets.

A node at level L is in a document's gold (or predictions) when a gold (predicted) code of the
document is the node or lies below it: the set-based view, one count per document and node.
"""

from __future__ import annotations

import polars as pl

from hieval.analysis.tree import Tree, labels_of
from hieval.metrics.count_measures import PRF_MEASURES

COLUMNS = ("code", "title", "level", "support", "tp", "fp", "fn", "precision", "recall", "f1")


def node_labels(labels: pl.DataFrame, tree: Tree, levels: tuple[str, ...]) -> pl.DataFrame:
    """``doc_id, level, code``: the nodes at ``levels`` a label table's documents carry (each
    once per document)."""
    return (
        labels_of(labels)
        .join(tree.ancestors.filter(pl.col("level").is_in(levels)), on="code")
        .select("doc_id", "level", pl.col("ancestor").alias("code"))
        .unique()
    )


def code_table(
    gold: pl.DataFrame,
    predicted: pl.DataFrame,
    tree: Tree,
    *,
    levels: tuple[str, ...],
    train_gold: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """``code, title, level, support, tp, fp, fn, precision, recall, f1`` (and
    ``train_frequency``, the training documents carrying the node, with ``train_gold``) for
    every node of ``levels`` the gold or the predictions reach; ``support`` is the gold
    documents (TP + FN). Rows by level (deepest first), then code."""
    truth = node_labels(gold, tree, levels).with_columns(pl.lit(True).alias("_gold"))
    guess = node_labels(predicted, tree, levels).with_columns(pl.lit(True).alias("_pred"))
    both = truth.join(guess, on=["doc_id", "level", "code"], how="full", coalesce=True)
    g, p = pl.col("_gold").fill_null(False), pl.col("_pred").fill_null(False)
    counts = both.group_by("level", "code").agg(
        (g & p).sum().cast(pl.Int64).alias("tp"),
        (p & ~g).sum().cast(pl.Int64).alias("fp"),
        (g & ~p).sum().cast(pl.Int64).alias("fn"),
    )
    tp, fp, fn = pl.col("tp"), pl.col("fp"), pl.col("fn")
    table = counts.with_columns(
        (tp + fn).alias("support"),
        *(formula(tp, fp, fn).alias(name) for name, formula in PRF_MEASURES.items()),
    ).join(tree.titles, on="code", how="left")
    columns = list(COLUMNS)
    if train_gold is not None:
        frequency = (
            node_labels(train_gold, tree, levels)
            .group_by("level", "code")
            .agg(pl.len().cast(pl.Int64).alias("train_frequency"))
        )
        table = table.join(frequency, on=["level", "code"], how="left").with_columns(
            pl.col("train_frequency").fill_null(0)
        )
        columns.append("train_frequency")
    order = {level: i for i, level in enumerate(tree.levels)}
    return table.sort(pl.col("level").replace_strict(order), "code").select(columns)
