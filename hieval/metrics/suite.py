"""ICM and the metrics Amigó & Delgado (ACL 2022) compare it with, as tidy rows.

Everything here is computed from additive tables the engine already keeps — the flat per-label
and per-document counts and the per-item sums of :mod:`hieval.engine.icm` — so it shards like the
rest. What each metric is (family, level, average, paper name, formula) is declared in
:mod:`hieval.metrics.registry` (:data:`~hieval.metrics.registry.SUITE`); the label- and
example-based formulas are its ``per_unit`` functions. Computed here: ICM and ICM-Norm (from the
item sums' IC of P, G and P ∪ G), PROP-F (where W sums inverse propensities 1/p_l, Jain et al.,
and both sets are extended with an empty class ∅ held by every item, N_∅ = N, so that empty
sets score 1 instead of 0/0) and HF (F1 between ancestor-augmented sets, the root excluded).

Conventions the paper leaves open: the label set L of LB-* and EB-HAMM is, by default, the
labels seen in the gold or the predictions (``label_set: observed``, as scikit-learn does with a
binarizer fitted on both); ``hierarchy`` uses every leaf code of the hierarchy, where unseen
labels count as perfectly classified (all true negatives). An item with empty P and G scores 1
on every example-based measure (nothing to find, nothing wrongly found). Items are the gold
documents (``icm.empty_gold`` decides whether label-less ones count). Logs are base 2 (ICM's
bits); the propensity formula uses natural logs, as Jain et al. define it.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from hieval.engine.icm import IcmParams
from hieval.errors import ConfigError
from hieval.metrics.registry import DOCUMENTS, NODES, SUITE, Metric, exact_mean

LABEL_SETS = ("observed", "hierarchy")
DEFAULT_LABEL_SET = "observed"


def icm_values(items: pl.DataFrame, params: IcmParams) -> dict[str, float]:
    """ICM, ICM(G, G) and ICM-Norm = max(0, (ICM(P,G) + ICM(G,G)) / (2·ICM(G,G))).

    Means are exact (:func:`~hieval.metrics.registry.exact_mean`): independent of item order.
    """
    n = items.height
    if n == 0:
        return {"icm": 0.0, "icm_gold": 0.0, "icm_norm": 0.0}
    a1, a2, b = params.alpha1, params.alpha2, params.beta
    per_item = (a1 * items["ic_pred"] + a2 * items["ic_gold"] - b * items["ic_union"]).to_list()
    per_gold = ((a1 + a2 - b) * items["ic_gold"]).to_list()
    icm, icm_gold = exact_mean(per_item), exact_mean(per_gold)
    norm = max(0.0, (icm + icm_gold) / (2 * icm_gold)) if icm_gold else 0.0
    return {"icm": icm, "icm_gold": icm_gold, "icm_norm": norm}


def _item_values(items: pl.DataFrame, params: IcmParams) -> dict[tuple[str, str], float]:
    """The metrics computed from the per-item sums: ICM, ICM-Norm, PROP-F and HF."""
    n = items.height
    values = icm_values(items, params)
    w_empty = params.inverse_propensity(n, n)  # the empty class every item holds (N_∅ = N)
    prop = [
        2 * (both + w_empty) / (pred + gold + 2 * w_empty)
        for pred, gold, both in zip(items["w_pred"], items["w_gold"], items["w_both"], strict=True)
    ]
    hier = [
        2 * both / (pred + gold) if pred + gold else 1.0
        for pred, gold, both in zip(
            items["anc_pred"], items["anc_gold"], items["anc_both"], strict=True
        )
    ]
    return {
        ("icm", "icm"): values["icm"],
        ("icm", "icm_norm"): values["icm_norm"],
        ("propensity", "f1"): exact_mean(prop),
        ("hierarchical", "f1"): exact_mean(hier),
    }


def suite_rows(
    nodes: pl.DataFrame,
    docs: pl.DataFrame,
    items: pl.DataFrame,
    *,
    params: IcmParams,
    label_set: str = DEFAULT_LABEL_SET,
    n_labels: int | None = None,
) -> pl.DataFrame:
    """Tidy rows (without the model column) for ICM and the comparison metrics: every metric of
    :data:`hieval.metrics.registry.SUITE`, in its order.

    ``nodes`` and ``docs`` are the per-node and per-document count tables, ``items`` the
    per-item sums (see :mod:`hieval.engine.driver`); ``n_labels`` the number of leaf codes of
    the hierarchy, needed when ``label_set`` is ``hierarchy``.
    """
    if label_set not in LABEL_SETS:
        raise ConfigError(f"label_set must be one of {LABEL_SETS}, not {label_set!r}")
    n = items.height
    from_items = _item_values(items, params)
    if n == 0:  # no gold items: only ICM is defined (as 0)
        wanted = [m for m in SUITE if m.family == "icm"]
        return _rows(wanted, [from_items[m.family, m.metric] for m in wanted])

    labels = nodes.filter(pl.col("family") == "flat").select("tp", "fp", "fn")
    unseen = 0
    if label_set == "hierarchy":
        if n_labels is None:
            raise ConfigError("label_set 'hierarchy' needs the number of leaf codes")
        unseen = max(n_labels - labels.height, 0)
    per_doc = (
        items.select("doc_id")
        .join(
            docs.filter(pl.col("family") == "flat").select("doc_id", "tp", "fp", "fn"),
            on="doc_id",
            how="left",
        )
        .fill_null(0)
    )
    units = {
        # Per label over the N items; labels seen nowhere count as perfectly classified.
        NODES: (_arrays(labels, unseen), n),
        # Per item over the |L| labels of the label set.
        DOCUMENTS: (_arrays(per_doc, 0), labels.height + unseen),
    }
    values = []
    for metric in SUITE:
        if metric.per_unit is None:
            values.append(from_items[metric.family, metric.metric])
        else:
            (tp, fp, fn), size = units[metric.source]
            values.append(exact_mean(metric.per_unit(tp, fp, fn, size).tolist()))
    return _rows(list(SUITE), values)


def _arrays(frame: pl.DataFrame, zeros: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``tp, fp, fn`` columns as int64 arrays, with ``zeros`` all-zero units appended."""
    pad = np.zeros(zeros, dtype=np.int64)
    return tuple(  # type: ignore[return-value]
        np.concatenate([frame[c].to_numpy().astype(np.int64), pad]) for c in ("tp", "fp", "fn")
    )


def _rows(metrics: list[Metric], values: list[float]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "family": [m.family for m in metrics],
            "level": [m.level for m in metrics],
            "average": [m.average for m in metrics],
            "metric": [m.metric for m in metrics],
            "value": [float(v) for v in values],
        },
        schema={
            "family": pl.String,
            "level": pl.String,
            "average": pl.String,
            "metric": pl.String,
            "value": pl.Float64,
        },
    )
