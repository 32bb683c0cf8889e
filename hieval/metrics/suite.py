"""ICM and the metrics Amigó & Delgado (ACL 2022) compare it with, as tidy rows.

Everything here is computed from additive tables the engine already keeps — the flat per-label
and per-document counts and the per-item sums of :mod:`hieval.engine.icm` — so it shards like the
rest. What each metric is (family, level, average, paper name, formula) is declared in
:mod:`hieval.metrics.registry` (:data:`~hieval.metrics.registry.SUITE`); the label- and
example-based formulas are its ``per_unit`` functions. Computed here: ICM and ICM-Norm (from the
item sums' IC of P, G and P ∪ G), PROP-F (where W sums inverse propensities 1/p_l, Jain et al.,
and both sets are extended with an empty class ∅ held by every item, N_∅ = N, so that empty
sets score 1 instead of 0/0), HF (F1 between ancestor-augmented sets, the root excluded) and
LCA-F (the same, augmented only up to the lowest common ancestors, :mod:`hieval.engine.lca`).

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
from hieval.metrics.registry import DOCUMENTS, NODES, SUITE, Metric, exact_mean, ratio_or_one

LABEL_SETS = ("observed", "hierarchy")
DEFAULT_LABEL_SET = "observed"


def icm_per_item(items: pl.DataFrame, params: IcmParams) -> tuple[np.ndarray, np.ndarray]:
    """Per gold item: ICM_i = α1·IC(P_i) + α2·IC(G_i) − β·IC(P_i ∪ G_i), and ICM(G_i, G_i)."""
    a1, a2, b = params.alpha1, params.alpha2, params.beta
    ic_pred, ic_gold, ic_union = (items[c].to_numpy() for c in ("ic_pred", "ic_gold", "ic_union"))
    return a1 * ic_pred + a2 * ic_gold - b * ic_union, (a1 + a2 - b) * ic_gold


def icm_norm(icm, icm_gold):
    """ICM-Norm = max(0, (ICM(P,G) + ICM(G,G)) / (2·ICM(G,G))), 0 when ICM(G,G) is 0; on
    numbers or (replicate) arrays."""
    icm, icm_gold = np.asarray(icm, dtype=np.float64), np.asarray(icm_gold, dtype=np.float64)
    out = np.zeros(np.broadcast_shapes(icm.shape, icm_gold.shape))
    np.divide(icm + icm_gold, 2 * icm_gold, out=out, where=icm_gold != 0)
    return np.maximum(out, 0.0)


def icm_values(items: pl.DataFrame, params: IcmParams) -> dict[str, float]:
    """ICM, ICM(G, G) and ICM-Norm.

    Means are exact (:func:`~hieval.metrics.registry.exact_mean`): independent of item order.
    """
    n = items.height
    if n == 0:
        return {"icm": 0.0, "icm_gold": 0.0, "icm_norm": 0.0}
    per_item, per_gold = icm_per_item(items, params)
    icm, icm_gold = exact_mean(per_item), exact_mean(per_gold)
    return {"icm": icm, "icm_gold": icm_gold, "icm_norm": float(icm_norm(icm, icm_gold))}


def item_measures(items: pl.DataFrame, params: IcmParams) -> dict[tuple[str, str], np.ndarray]:
    """Per gold item, the value PROP-F and HF average (their one formula each):

    - PROP-F: 2·(W(P ∩ G) + w∅) / (W(P) + W(G) + 2·w∅), w∅ the weight of the empty class every
      item holds (N_∅ = N, with N the items of the whole test set);
    - HF: 2·|A(P) ∩ A(G)| / (|A(P)| + |A(G)|), 1 when both ancestor sets are empty;
    - LCA-F: 2·|P⁺ ∩ G⁺| / (|P⁺| + |G⁺|) over the sets augmented up to the lowest common
      ancestors (:mod:`hieval.engine.lca`), 1 when both are empty, 0 when one is.
    """
    n = items.height
    w_empty = params.inverse_propensity(n, n)
    w_pred, w_gold, w_both = (items[c].to_numpy() for c in ("w_pred", "w_gold", "w_both"))
    prop = 2 * (w_both + w_empty) / (w_pred + w_gold + 2 * w_empty)
    anc = [items[c].to_numpy().astype(np.int64) for c in ("anc_pred", "anc_gold", "anc_both")]
    lca = [items[c].to_numpy().astype(np.int64) for c in ("lca_pred", "lca_gold", "lca_both")]
    return {
        ("propensity", "f1"): prop,
        ("hierarchical", "f1"): ratio_or_one(2 * anc[2], anc[0] + anc[1]),
        ("lca", "f1"): ratio_or_one(2 * lca[2], lca[0] + lca[1]),
    }


def _item_values(items: pl.DataFrame, params: IcmParams) -> dict[tuple[str, str], float]:
    """The metrics computed from the per-item sums: ICM, ICM-Norm, PROP-F, HF and LCA-F."""
    values = icm_values(items, params)
    means = {key: exact_mean(v) for key, v in item_measures(items, params).items()}
    return {("icm", "icm"): values["icm"], ("icm", "icm_norm"): values["icm_norm"], **means}


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
            maintain_order="left",  # one row per item, in the items' order
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
            if metric.average == "micro":  # the formula of the summed counts
                values.append(metric.per_unit(tp.sum(), fp.sum(), fn.sum(), size * len(tp)))
            else:
                values.append(exact_mean(metric.per_unit(tp, fp, fn, size)))
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
