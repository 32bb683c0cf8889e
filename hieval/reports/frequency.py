"""Codes binned by how often they occur in the training gold, with flat F1 per bin: the long-tail
analysis of the ICD-coding literature (rare codes are where models fail).

A code's training frequency is the number of training documents carrying it; its flat counts
(TP, FP, FN over the test documents) come from the model's per-node table, so the bins are
exact sums, and the F1 of a bin is the micro F1 over its codes.
"""

from __future__ import annotations

import polars as pl

from hieval.metrics.count_measures import F1

#: (label, lowest, highest) training documents per bin; None: no upper bound.
BINS = (
    ("unseen", 0, 0),
    ("1-10", 1, 10),
    ("11-100", 11, 100),
    ("101-1,000", 101, 1000),
    ("> 1,000", 1001, None),
)


def train_frequencies(train_gold: pl.DataFrame) -> pl.DataFrame:
    """``code, train_docs`` from a normalised gold table (``doc_id, code``)."""
    return (
        train_gold.filter(pl.col("code").is_not_null())
        .unique(["doc_id", "code"])
        .group_by("code")
        .agg(pl.len().alias("train_docs"))
    )


def _bin_of(docs: pl.Expr) -> pl.Expr:
    expr = pl.lit(BINS[-1][0])
    for label, low, high in reversed(BINS[:-1]):
        expr = pl.when(docs.is_between(low, high)).then(pl.lit(label)).otherwise(expr)
    return expr


def frequency_bins(nodes: dict[str, pl.DataFrame], frequencies: pl.DataFrame) -> pl.DataFrame:
    """``model, bin, codes, tp, fp, fn, f1`` per model and bin (bins in ``BINS`` order, empty
    bins left out), from each model's per-node table (its ``flat`` rows)."""
    order = {label: i for i, (label, _, _) in enumerate(BINS)}
    parts = []
    for model, table in nodes.items():
        flat = (
            table.filter(pl.col("family") == "flat")
            .select(pl.col("node").alias("code"), "tp", "fp", "fn")
            .join(frequencies, on="code", how="left", maintain_order="none")  # then grouped
            .with_columns(_bin_of(pl.col("train_docs").fill_null(0)).alias("bin"))
        )
        parts.append(
            flat.group_by("bin")
            .agg(pl.len().alias("codes"), pl.col("tp", "fp", "fn").sum())
            .with_columns(pl.lit(model).alias("model"))
        )
    if not parts:
        return pl.DataFrame()
    tp, fp, fn = (pl.col(c).cast(pl.Float64) for c in ("tp", "fp", "fn"))
    return (
        pl.concat(parts)
        .with_columns(
            F1(tp, fp, fn).alias("f1"),
            pl.col("bin").replace_strict(order, return_dtype=pl.Int64).alias("_order"),
        )
        .sort("model", "_order")
        .drop("_order")
        .select("model", "bin", "codes", "tp", "fp", "fn", "f1")
    )
