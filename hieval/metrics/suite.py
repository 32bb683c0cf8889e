"""ICM and the metrics Amigó & Delgado (ACL 2022) compare it with, as tidy rows.

Everything here is computed from additive tables the engine already keeps — the flat per-label
and per-document counts and the per-item sums of :mod:`hieval.engine.icm` — so it shards like the
rest. Families (the paper's names in brackets):

- ``icm`` / level ``overall`` / average ``mean``: ``icm`` [ICM], ``icm_norm`` [ICM-Norm].
- ``label`` / ``leaf`` / ``macro``: ``accuracy`` [LB-ACC] = mean over labels l of
  (TP_l + TN_l) / N; ``f1`` [LB-F] = mean over labels of 2TP_l / (2TP_l + FP_l + FN_l).
- ``example`` / ``leaf`` / ``mean``: ``hamming_loss`` [EB-HAMM] = mean over items of
  (FP_i + FN_i) / |L| (a loss: lower is better); ``jaccard`` [EB-JACC] = mean of
  TP_i / (TP_i + FP_i + FN_i); ``subset_accuracy`` [EB-SUBACC] = share of items with P_i = G_i;
  ``f1`` [EB-F] = mean of 2TP_i / (2TP_i + FP_i + FN_i).
- ``propensity`` / ``leaf`` / ``mean``: ``f1`` [PROP-F] = mean over items of
  2·(W(P_i ∩ G_i) + w_∅) / (W(P_i) + W(G_i) + 2·w_∅), where W sums inverse propensities
  1/p_l (Jain et al., A = 0.55, B = 1.5) and both sets are extended with an empty class ∅ held
  by every item (N_∅ = N), so that empty sets score 1 instead of 0/0.
- ``hierarchical`` / ``overall`` / ``mean``: ``f1`` [HF] = mean over items of
  2·|A(P_i) ∩ A(G_i)| / (|A(P_i)| + |A(G_i)|) over ancestor-augmented sets (root excluded).

Conventions the paper leaves open: the label set L of LB-* and EB-HAMM is, by default, the
labels seen in the gold or the predictions (``label_set: observed``, as scikit-learn does with a
binarizer fitted on both); ``hierarchy`` uses every leaf code of the hierarchy, where unseen
labels count as perfectly classified (all true negatives). An item with empty P and G scores 1
on every example-based measure (nothing to find, nothing wrongly found). Items are the gold
documents (``icm.empty_gold`` decides whether label-less ones count). Logs are base 2 (ICM's
bits); the propensity formula uses natural logs, as Jain et al. define it.
"""

from __future__ import annotations

import math

import polars as pl

from hieval.engine.icm import IcmParams, icm_values

LABEL_SETS = ("observed", "hierarchy")


def _mean(values: list[float]) -> float:
    """Mean with a correctly rounded sum: independent of row order, bit for bit."""
    return math.fsum(values) / len(values) if values else 0.0


def _row(family: str, level: str, average: str, metric: str, value: float) -> dict:
    return {
        "family": family,
        "level": level,
        "average": average,
        "metric": metric,
        "value": float(value),
    }


def suite_rows(
    nodes: pl.DataFrame,
    docs: pl.DataFrame,
    items: pl.DataFrame,
    params: IcmParams,
    label_set: str = "observed",
    n_labels: int | None = None,
) -> pl.DataFrame:
    """Tidy rows (without the model column) for ICM and the comparison metrics.

    ``nodes`` and ``docs`` are the count tables of :func:`hieval.engine.counts.count`; ``items`` the
    per-item sums of ``item_sums``; ``n_labels`` the number of leaf codes of the
    hierarchy, needed when ``label_set`` is ``hierarchy``.
    """
    if label_set not in LABEL_SETS:
        raise ValueError(f"label_set must be one of {LABEL_SETS}, not {label_set!r}")
    n = items.height
    values = icm_values(items, params)
    rows = [
        _row("icm", "overall", "mean", "icm", values["icm"]),
        _row("icm", "overall", "mean", "icm_norm", values["icm_norm"]),
    ]
    if n == 0:
        return pl.DataFrame(rows)

    labels = nodes.filter(pl.col("family") == "flat").select("tp", "fp", "fn")
    unseen = 0
    if label_set == "hierarchy":
        if n_labels is None:
            raise ValueError("label_set 'hierarchy' needs the number of leaf codes")
        unseen = max(n_labels - labels.height, 0)
    size = labels.height + unseen
    tp, fp, fn = (labels[c].to_list() for c in ("tp", "fp", "fn"))
    accuracy = [(n - f - m) / n for f, m in zip(fp, fn, strict=True)] + [1.0] * unseen
    label_f1 = [2 * t / (2 * t + f + m) for t, f, m in zip(tp, fp, fn, strict=True)]
    rows += [
        _row("label", "leaf", "macro", "accuracy", _mean(accuracy)),
        _row("label", "leaf", "macro", "f1", _mean(label_f1 + [1.0] * unseen)),
    ]

    per_doc = (
        items.select("doc_id")
        .join(
            docs.filter(pl.col("family") == "flat").select("doc_id", "tp", "fp", "fn"),
            on="doc_id",
            how="left",
        )
        .fill_null(0)
    )
    tp, fp, fn = (per_doc[c].to_list() for c in ("tp", "fp", "fn"))
    triples = list(zip(tp, fp, fn, strict=True))
    rows += [
        _row(
            "example",
            "leaf",
            "mean",
            "hamming_loss",
            _mean([(f + m) / size if size else 0.0 for _, f, m in triples]),
        ),
        _row(
            "example",
            "leaf",
            "mean",
            "jaccard",
            _mean([t / (t + f + m) if t + f + m else 1.0 for t, f, m in triples]),
        ),
        _row(
            "example",
            "leaf",
            "mean",
            "subset_accuracy",
            _mean([1.0 if f + m == 0 else 0.0 for _, f, m in triples]),
        ),
        _row(
            "example",
            "leaf",
            "mean",
            "f1",
            _mean([2 * t / (2 * t + f + m) if t + f + m else 1.0 for t, f, m in triples]),
        ),
    ]

    b, a = params.propensity_b, params.propensity_a
    w_empty = 1 + (math.log(max(n, 1)) - 1) * (b + 1) ** a * (n + b) ** -a
    prop = [
        2 * (both + w_empty) / (pred + gold + 2 * w_empty)
        for pred, gold, both in zip(items["w_pred"], items["w_gold"], items["w_both"], strict=True)
    ]
    hier = [
        2 * both / (pred + gold) if pred + gold else 1.0
        for pred, gold, both in zip(items["n_pred"], items["n_gold"], items["n_both"], strict=True)
    ]
    rows += [
        _row("propensity", "leaf", "mean", "f1", _mean(prop)),
        _row("hierarchical", "overall", "mean", "f1", _mean(hier)),
    ]
    return pl.DataFrame(rows)


#: Paper names of every metric :func:`score_all` returns, and whether higher is better.
PAPER_METRICS = {
    "ICM": True,
    "ICM-Norm": True,
    "LB-ACC": True,
    "LB-F": True,
    "EB-HAMM": False,
    "EB-JACC": True,
    "EB-SUBACC": True,
    "EB-F": True,
    "PROP-F": True,
    "HF": True,
    "F-flat": True,
    "F-set": True,
    "F-CoPHE": True,
}
_TIDY_NAMES = {
    ("icm", "icm"): "ICM",
    ("icm", "icm_norm"): "ICM-Norm",
    ("label", "accuracy"): "LB-ACC",
    ("label", "f1"): "LB-F",
    ("example", "hamming_loss"): "EB-HAMM",
    ("example", "jaccard"): "EB-JACC",
    ("example", "subset_accuracy"): "EB-SUBACC",
    ("example", "f1"): "EB-F",
    ("propensity", "f1"): "PROP-F",
    ("hierarchical", "f1"): "HF",
}


def score_all(
    gold: pl.DataFrame,
    predictions: pl.DataFrame,
    ancestors: pl.DataFrame,
    levels: tuple[str, ...],
    max_level: str | None = None,
    params: IcmParams | None = None,
) -> dict[str, float]:
    """Every metric of one output in one call, by its paper name (see ``PAPER_METRICS``).

    For experiments that score many small synthetic outputs in memory: the same engine as the
    workflow (the engine driver). F-flat,
    F-set and F-CoPHE are micro F1 (flat on leaves; set-based and CoPHE ``overall`` up to
    ``max_level``, by default every level below the root).
    """
    from hieval.engine import icm
    from hieval.engine.counts import count
    from hieval.metrics.prf import metrics_table

    params = params or IcmParams()
    evaluated = levels[:-1] if max_level is None else levels[: levels.index(max_level) + 1]
    nodes, docs = count(gold, predictions, ancestors, evaluated)
    weights = icm.node_weights(gold, ancestors, levels, params)
    items = icm.item_sums(gold, predictions, ancestors, levels, weights, params)
    scores = {}
    for row in suite_rows(nodes, docs, items, params).iter_rows(named=True):
        scores[_TIDY_NAMES[row["family"], row["metric"]]] = row["value"]
    micro = metrics_table(nodes, "").filter(
        (pl.col("average") == "micro") & (pl.col("metric") == "f1")
    )
    for family, level, name in (
        ("flat", "leaf", "F-flat"),
        ("set", "overall", "F-set"),
        ("cophe", "overall", "F-CoPHE"),
    ):
        value = micro.filter((pl.col("family") == family) & (pl.col("level") == level))["value"]
        scores[name] = value.item() if value.len() else 0.0
    return scores
