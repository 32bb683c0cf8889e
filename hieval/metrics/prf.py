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

from hieval.codes.icd9 import CODE_TYPES
from hieval.metrics.arithmetic import exact_mean
from hieval.metrics.count_measures import COUNT_MEASURES
from hieval.metrics.registry import OVERALL, PRF_METRICS


def _summaries(per_node: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Summed counts and, per measure, its exact mean over the nodes (``macro|<measure>``)."""
    per_node_cols = [f"node|{m}" for m in COUNT_MEASURES]
    grouped = per_node.group_by(by).agg(pl.col("tp", "fp", "fn").sum(), pl.col(per_node_cols))
    return grouped.with_columns(
        pl.col(f"node|{m}").map_elements(exact_mean, return_dtype=pl.Float64).alias(f"macro|{m}")
        for m in COUNT_MEASURES
    ).drop(per_node_cols)


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
        measure(tp, fp, fn).alias(f"node|{name}") for name, measure in COUNT_MEASURES.items()
    )
    per_level = _summaries(per_node, ["family", "level"])
    overall = _summaries(per_node.filter(pl.col("family") != "flat"), ["family"]).with_columns(
        pl.lit(OVERALL).alias("level")
    )
    summary = pl.concat([per_level, overall.select(per_level.columns)])
    macro_p, macro_r = pl.col("macro|precision"), pl.col("macro|recall")

    def rows(average: str, values: dict[str, pl.Expr]) -> pl.DataFrame:
        return summary.select(
            "family", "level", pl.lit(average).alias("average"), tp, fp, fn,
            *(value.alias(name) for name, value in values.items()),
        )  # fmt: skip

    wide = pl.concat(
        [
            rows("micro", {n: m(tp, fp, fn) for n, m in COUNT_MEASURES.items()}),
            rows("macro", {n: pl.col(f"macro|{n}") for n in COUNT_MEASURES}),
            rows(
                "macro_hm",
                {
                    n: pl.col(f"macro|{n}") if m.of_pr is None else m.of_pr(macro_p, macro_r)
                    for n, m in COUNT_MEASURES.items()
                },
            ),
        ]
    )
    return wide.unpivot(
        index=["family", "level", "average"],
        on=list(PRF_METRICS),
        variable_name="metric",
        value_name="value",
    )
