"""Precision, recall and F1 from the additive per-node counts, as one tidy table.

Conventions (documented in the README):

- ``micro``: P, R, F1 from the counts summed over the nodes of a level.
- ``macro``: the mean over the nodes of a level that have gold support or a prediction of
  per-node P, R and F1 (F1 macro is the mean of per-node F1s).
- ``macro_hm``: P and R as in ``macro``; F1 is the harmonic mean of macro P and macro R (the
  convention of CAML and much of the ICD-coding literature).
- Zero division gives 0. The ``tp``, ``fp``, ``fn`` rows of every average are the summed counts.
- ``overall`` (set-based and CoPHE) pools every evaluated level from the deepest up to
  ``max_level``: counts are summed over levels; macro averages over all (level, node) pairs.
- Flat evaluation has the single level ``leaf``.

The table is long (``model, family, level, average, metric, value``) so that new metrics add
rows, never columns.
"""

from __future__ import annotations

import math

import polars as pl

from hieval.codes import CODE_TYPES, icd9_branch
from hieval.engine.counts import FAMILIES

AVERAGES = ("micro", "macro", "macro_hm", "mean")
METRICS = ("tp", "fp", "fn", "precision", "recall", "f1")
#: Families and metrics of the suite (ICM and the comparison metrics), for ordering reports.
SUITE_FAMILIES = ("icm", "label", "example", "propensity", "hierarchical")
SUITE_METRICS = ("icm", "icm_norm", "accuracy", "hamming_loss", "jaccard", "subset_accuracy")
TIDY_SCHEMA = {
    "model": pl.String,
    "family": pl.String,
    "level": pl.String,
    "average": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
}


def ratio(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    """num / den, or 0 where den is 0 (the zero-division convention)."""
    return pl.when(den > 0).then(num / den).otherwise(0.0)


def exact_mean(values: pl.Series) -> float:
    """Mean with a correctly rounded sum (``math.fsum``).

    A parallel group-by sums floats in an order that varies between runs, which changes the last
    bits of a mean; the correctly rounded sum does not depend on order, so reports regenerate
    bit for bit.
    """
    return math.fsum(values) / len(values) if len(values) else 0.0


def _summaries(per_node: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    grouped = per_node.group_by(by).agg(pl.col("tp", "fp", "fn").sum(), pl.col("p", "r", "f"))
    return grouped.with_columns(
        pl.col(src).map_elements(exact_mean, return_dtype=pl.Float64).alias(dst)
        for src, dst in (("p", "macro_p"), ("r", "macro_r"), ("f", "macro_f"))
    ).drop("p", "r", "f")


def metrics_table(nodes: pl.DataFrame, model: str, split_kinds: bool = False) -> pl.DataFrame:
    """The tidy metric rows of one model from its per-node count table.

    With ``split_kinds`` (ICD-9 hierarchies), micro rows are added for diagnoses and procedures
    separately, as the field reports them: families ``flat_dx``, ``flat_proc``, ``set_dx``, ...
    Diagnosis and procedure subtrees only meet at the root, so every node belongs to one.
    """
    rows = _metric_rows(nodes)
    if split_kinds:
        branch = pl.col("node").map_elements(icd9_branch, return_dtype=pl.String)
        tagged = nodes.with_columns(branch.alias("_kind"))
        for kind in CODE_TYPES:
            part = _metric_rows(tagged.filter(pl.col("_kind") == kind).drop("_kind"))
            rows = pl.concat(
                [
                    rows,
                    part.filter(pl.col("average") == "micro").with_columns(
                        (pl.col("family") + f"_{kind}").alias("family")
                    ),
                ]
            )
    return rows.select(
        pl.lit(model).alias("model"), "family", "level", "average", "metric", "value"
    )


def _metric_rows(nodes: pl.DataFrame) -> pl.DataFrame:
    """``family, level, average, metric, value`` rows from a per-node count table."""
    tp, fp, fn = (pl.col(c).cast(pl.Float64) for c in ("tp", "fp", "fn"))
    per_node = nodes.with_columns(
        ratio(tp, tp + fp).alias("p"),
        ratio(tp, tp + fn).alias("r"),
        ratio(2 * tp, 2 * tp + fp + fn).alias("f"),
    )
    per_level = _summaries(per_node, ["family", "level"])
    overall = _summaries(per_node.filter(pl.col("family") != "flat"), ["family"]).with_columns(
        pl.lit("overall").alias("level")
    )
    summary = pl.concat([per_level, overall.select(per_level.columns)])
    micro_p, micro_r = ratio(tp, tp + fp), ratio(tp, tp + fn)
    macro_p, macro_r = pl.col("macro_p"), pl.col("macro_r")
    wide = pl.concat(
        [
            summary.select(
                "family",
                "level",
                pl.lit("micro").alias("average"),
                tp,
                fp,
                fn,
                micro_p.alias("precision"),
                micro_r.alias("recall"),
                ratio(2 * tp, 2 * tp + fp + fn).alias("f1"),
            ),
            summary.select(
                "family",
                "level",
                pl.lit("macro").alias("average"),
                tp,
                fp,
                fn,
                macro_p.alias("precision"),
                macro_r.alias("recall"),
                pl.col("macro_f").alias("f1"),
            ),
            summary.select(
                "family",
                "level",
                pl.lit("macro_hm").alias("average"),
                tp,
                fp,
                fn,
                macro_p.alias("precision"),
                macro_r.alias("recall"),
                ratio(2 * macro_p * macro_r, macro_p + macro_r).alias("f1"),
            ),
        ]
    )
    return wide.unpivot(
        index=["family", "level", "average"],
        on=list(METRICS),
        variable_name="metric",
        value_name="value",
    )


def sort_tidy(
    tidy: pl.DataFrame, levels: tuple[str, ...], models: list[str] | None = None
) -> pl.DataFrame:
    """Order rows by model (sheet order), family, level (deep to high), average, metric."""
    orders = {
        "family": [*FAMILIES, *(f"{f}_{k}" for k in CODE_TYPES for f in FAMILIES), *SUITE_FAMILIES],
        "level": ["leaf", *levels, "overall"],
        "average": list(AVERAGES),
        "metric": [*METRICS, *SUITE_METRICS],
    }
    if models is not None:
        orders["model"] = models
    keys = []
    for column, order in orders.items():
        rank = {v: i for i, v in enumerate(order)}
        keys.append(pl.col(column).replace_strict(rank, default=len(rank), return_dtype=pl.Int64))
    extra = [] if models is not None else [pl.col("model")]
    return tidy.sort([*extra, *keys, pl.col("family"), pl.col("level")], maintain_order=True)
