"""A model's tidy metric rows from its additive tables, and one-call scoring for experiments.

:func:`model_rows` is what the workflow's ``metrics`` rule and ``hieval evaluate`` compute per
model; :func:`score_all` runs the engine driver on frames in memory and returns every metric
with a paper name (the meta experiments' metric list, :data:`~hieval.metrics.registry.BY_PAPER`).
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from hieval.engine.driver import evaluate
from hieval.engine.icm import IcmParams
from hieval.engine.keys import Source
from hieval.metrics.prf import metrics_table
from hieval.metrics.registry import BY_PAPER, paper_level, sort_tidy
from hieval.metrics.suite import DEFAULT_LABEL_SET, icm_values, suite_rows


def model_rows(  # noqa: PLR0913 (three tables and the pipeline stages' keyword-only options)
    nodes: pl.DataFrame,
    docs: pl.DataFrame,
    items: pl.DataFrame,
    *,
    model: str,
    levels: tuple[str, ...],
    params: IcmParams,
    label_set: str = DEFAULT_LABEL_SET,
    n_labels: int | None = None,
    split_kinds: Callable[[str], str | None] | None = None,
) -> pl.DataFrame:
    """Every tidy row of one model (count families, ICM and the comparison metrics), in the
    registry's order; ``levels`` are the evaluated levels, deepest first."""
    suite = suite_rows(
        nodes, docs, items, params=params, label_set=label_set, n_labels=n_labels
    ).select(pl.lit(model).alias("model"), pl.all())
    prf = metrics_table(nodes, model, split_kinds=split_kinds)
    return sort_tidy(pl.concat([prf, suite]), levels, [model])


def score_all(
    gold: pl.DataFrame,
    predictions: pl.DataFrame,
    ancestors: pl.DataFrame,
    levels: tuple[str, ...],
    max_level: str | None = None,
    *,
    params: IcmParams | None = None,
) -> dict[str, float]:
    """Every metric with a paper name (F-flat, F-set, F-CoPHE, ICM, EB-F, ...), by that name.

    For experiments that score many small synthetic outputs in memory, through the same engine
    driver as the workflow (labels encoded once). F-set and F-CoPHE are the ``overall`` rows,
    pooling the levels up to ``max_level`` (by default every level below the root).
    """
    params = params or IcmParams()
    evaluated = levels[:-1] if max_level is None else levels[: levels.index(max_level) + 1]
    result = evaluate(
        gold, predictions, ancestors, levels=levels, evaluated=evaluated, params=params
    )
    tidy = model_rows(
        result.nodes, result.docs, result.item_sums, model="", levels=evaluated, params=params
    )
    values = {
        (r["family"], r["level"], r["average"], r["metric"]): r["value"]
        for r in tidy.iter_rows(named=True)
    }
    if result.item_sums is not None and result.item_sums.height == 0:
        # No gold item: only ICM is defined; every other metric scores 0 by convention.
        return {
            name: values.get((m.family, paper_level(m), m.average, m.metric), 0.0)
            for name, m in BY_PAPER.items()
        }
    missing = [
        name
        for name, m in BY_PAPER.items()
        if (m.family, paper_level(m), m.average, m.metric) not in values
    ]
    if missing:  # a registry entry that no computation produces: a bug, never a silent 0
        raise RuntimeError(f"no tidy row for the registered metrics {missing}")
    return {
        name: values[(m.family, paper_level(m), m.average, m.metric)]
        for name, m in BY_PAPER.items()
    }


def icm(
    gold: Source,
    predictions: Source,
    ancestors: Source,
    levels: tuple[str, ...],
    params: IcmParams | None = None,
    *,
    threads: int | None = None,
) -> dict[str, float]:
    """ICM, ICM(G, G) and ICM-Norm of one model in one call (node weights from this gold)."""
    params = params or IcmParams()
    result = evaluate(
        gold, predictions, ancestors, levels=levels, evaluated=(), params=params, threads=threads
    )
    return icm_values(result.item_sums, params)
