"""The ``hieval`` convention: hieval's own headline definitions, unchanged — the rows are taken
from the model's tidy metric table (:mod:`hieval.metrics.registry` defines them), only renamed
to the ``metric_average`` style the other conventions use (``f1_macro``, ``auc_micro``), so the
conventions sit side by side in one table."""

from __future__ import annotations

import polars as pl

from hieval.metrics.registry import LEAF

#: (family, average, metric) of the rows shown, by their name in conventions.parquet; the @K
#: rows (``ranking``, ``mean``) follow, one per K of the run.
OWN_ROWS = {
    "precision_micro": ("flat", "micro", "precision"),
    "recall_micro": ("flat", "micro", "recall"),
    "f1_micro": ("flat", "micro", "f1"),
    "precision_macro": ("flat", "macro", "precision"),
    "recall_macro": ("flat", "macro", "recall"),
    "f1_macro": ("flat", "macro", "f1"),
    "f1_macro_hm": ("flat", "macro_hm", "f1"),
    "auc_micro": ("ranking", "micro", "auc"),
    "auc_macro": ("ranking", "macro", "auc"),
}
RANKED = ("precision@", "recall@", "r_precision", "map")


def hieval_metrics(tidy: pl.DataFrame) -> dict[str, float]:
    """The headline rows of one model's tidy table (leaf level), by convention name."""
    leaf = tidy.filter(pl.col("level") == LEAF)
    value = {
        (r["family"], r["average"], r["metric"]): r["value"] for r in leaf.iter_rows(named=True)
    }
    out = {name: value[key] for name, key in OWN_ROWS.items() if key in value}
    for (family, average, metric), v in value.items():
        if family == "ranking" and average == "mean" and metric.startswith(RANKED):
            out[metric] = v
    return out
