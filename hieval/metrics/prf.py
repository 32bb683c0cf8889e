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

import polars as pl

from hieval.codes import CODE_TYPES
from hieval.metrics.registry import OVERALL, PRF_METRICS, exact_mean


def ratio(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    """num / den, or 0 where den is 0 (the zero-division convention)."""
    return pl.when(den > 0).then(num / den).otherwise(0.0)


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
        ratio(tp, tp + fp).alias("p"),
        ratio(tp, tp + fn).alias("r"),
        ratio(2 * tp, 2 * tp + fp + fn).alias("f"),
    )
    per_level = _summaries(per_node, ["family", "level"])
    overall = _summaries(per_node.filter(pl.col("family") != "flat"), ["family"]).with_columns(
        pl.lit(OVERALL).alias("level")
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
        on=list(PRF_METRICS),
        variable_name="metric",
        value_name="value",
    )
