"""Precision, recall and F1 of the count families (flat, set-based, CoPHE) as tidy rows.

The averages (``micro``, ``macro``, ``macro_hm``) and the zero-division convention are named in
:mod:`hieval.metrics.registry`. ``overall`` (set-based and CoPHE) pools every evaluated level
from the deepest up to ``max_level``: counts are summed over levels; macro averages over all
(level, node) pairs. Flat evaluation has the single level ``leaf``.

The table is long (``model, family, level, average, metric, value``) so that new metrics add
rows, never columns.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from hieval.codes.icd9 import CODE_TYPES
from hieval.metrics.registry import OVERALL, PRF_METRICS, exact_mean


def ratio(num, den):
    """num / den, or 0 where den is 0 (the zero-division convention).

    On Polars expressions (the tidy table) or numpy arrays (the bootstrap's replicates, which
    broadcast): the formulas below are written once and serve both, with the same float64
    operations in the same order, so a replicate with every weight 1 is the point estimate.
    """
    if isinstance(num, pl.Expr) or isinstance(den, pl.Expr):
        return pl.when(den > 0).then(num / den).otherwise(0.0)
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    out = np.zeros(np.broadcast_shapes(num.shape, den.shape))
    return np.divide(num, den, out=out, where=den > 0)


#: The denominators of precision, recall and F1 from TP, FP and FN: where one is 0 the metric
#: is undefined (no prediction, no gold, neither), and :func:`ratio` gives 0 by convention.
PRF_DENOMINATORS: dict[str, Callable] = {
    "precision": lambda tp, fp, fn: tp + fp,
    "recall": lambda tp, fp, fn: tp + fn,
    "f1": lambda tp, fp, fn: 2 * tp + fp + fn,
}
#: Precision, recall and F1 from TP, FP and FN (summed over a level for ``micro``, per node for
#: ``macro``): the one place these formulas are written.
PRF: dict[str, Callable] = {
    "precision": lambda tp, fp, fn: ratio(tp, PRF_DENOMINATORS["precision"](tp, fp, fn)),
    "recall": lambda tp, fp, fn: ratio(tp, PRF_DENOMINATORS["recall"](tp, fp, fn)),
    "f1": lambda tp, fp, fn: ratio(2 * tp, PRF_DENOMINATORS["f1"](tp, fp, fn)),
}


def harmonic_f1(precision, recall):
    """``macro_hm``'s F1: the harmonic mean of macro precision and macro recall."""
    return ratio(2 * precision * recall, precision + recall)


def _summaries(per_node: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    grouped = per_node.group_by(by).agg(pl.col("tp", "fp", "fn").sum(), pl.col("p", "r", "f"))
    return grouped.with_columns(
        pl.col(src).map_elements(exact_mean, return_dtype=pl.Float64).alias(dst)
        for src, dst in (("p", "macro_p"), ("r", "macro_r"), ("f", "macro_f"))
    ).drop("p", "r", "f")


def metrics_table(
    nodes: pl.DataFrame, model: str, split_kinds: Callable[[str], str | None] | None = None
) -> pl.DataFrame:
    """The tidy metric rows of one model from its per-node count table.

    With ``split_kinds`` (the code system's ``node -> dx | proc`` for ICD-9 and ICD-10 trees),
    micro rows are added for diagnoses and procedures separately, as the field reports them:
    families ``flat_dx``, ``flat_proc``, ``set_dx``, ... Diagnosis and procedure subtrees only
    meet at the root, so every node belongs to one.
    """
    rows = _metric_rows(nodes)
    if split_kinds is not None:
        # one call per distinct node, not per (family, level, node) row
        kinds = {node: split_kinds(node) for node in nodes["node"].unique().to_list()}
        branch = pl.col("node").replace_strict(kinds, default=None, return_dtype=pl.String)
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
        PRF["precision"](tp, fp, fn).alias("p"),
        PRF["recall"](tp, fp, fn).alias("r"),
        PRF["f1"](tp, fp, fn).alias("f"),
    )
    per_level = _summaries(per_node, ["family", "level"])
    overall = _summaries(per_node.filter(pl.col("family") != "flat"), ["family"]).with_columns(
        pl.lit(OVERALL).alias("level")
    )
    summary = pl.concat([per_level, overall.select(per_level.columns)])
    micro_p, micro_r = PRF["precision"](tp, fp, fn), PRF["recall"](tp, fp, fn)
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
                PRF["f1"](tp, fp, fn).alias("f1"),
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
                harmonic_f1(macro_p, macro_r).alias("f1"),
            ),
        ]
    )
    return wide.unpivot(
        index=["family", "level", "average"],
        on=list(PRF_METRICS),
        variable_name="metric",
        value_name="value",
    )
