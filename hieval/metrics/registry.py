"""The metric registry: the one place that says what each metric of the tidy table is.

A tidy row is ``model, family, level, average, metric, value``. Each :class:`Metric` here
declares one (family, average, metric) kind of row: the levels it has rows at, its name in the
papers, whether higher is better, which additive table it is computed from, and how. Everything
that lists metrics derives from this module: the tidy table's row order, the columns of
``summary.csv`` and ``summary.md``, the suite computation (:mod:`hieval.metrics.suite`), and the
metric list of the meta experiments. Adding a metric computable from the existing tables is one
entry here (and its test).

Conventions (the field's differ silently; each is named here and in docs/conventions.md):

- ``micro``: P, R, F1, F2 from the counts summed over the nodes of a level.
- ``macro``: the mean over the nodes of a level that have gold support or a prediction of
  per-node P, R, F1 and F2 (F1 macro is the mean of per-node F1s).
- ``macro_hm``: P and R as in ``macro``; F1 is the harmonic mean of macro P and macro R (the
  convention of CAML and much of the ICD-coding literature), F2 the F-beta (beta 2) of them.
- Zero division gives 0 in the P/R/F families; the ``tp``, ``fp``, ``fn`` rows of every
  average are the summed counts.
- Ranking ``mean`` metrics rank a document's codes by score, ties by code, unscored codes
  last (:mod:`hieval.metrics.document_measures`); MAP alone treats tied scores as one
  threshold.
- Example-based measures score an item with nothing predicted and nothing gold as 1 (0/0 = 1,
  scikit-learn's ``zero_division=1``); ``mean`` averages over the gold items.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from hieval.codes.icd9 import CODE_TYPES
from hieval.engine.counts import FAMILIES
from hieval.engine.keys import LEAF
from hieval.metrics.arithmetic import divide, exact_mean  # noqa: F401 (exact_mean re-exported)
from hieval.metrics.count_measures import COUNT_MEASURES
from hieval.metrics.document_measures import (
    ALL_DOCUMENTS,
    GOLD_DOCUMENTS,
    DocumentMean,
    average_precision,
    best_ps_ndcg_at,
    best_ps_precision_at,
    ndcg_at,
    precision_at,
    ps_ndcg_at,
    ps_precision_at,
    r_precision,
    recall_at,
)

#: LEAF (the leaf level's name) is the engine's (:data:`hieval.engine.keys.LEAF`), defined once.
OVERALL, EACH_LEVEL = "overall", "each level"
#: The additive tables metrics are computed from (see :mod:`hieval.engine.driver`).
NODES, DOCUMENTS, ITEMS = "per-node counts", "per-document counts", "per-item sums"

#: Ranking metrics have rows at the leaves and at each evaluated level (max-pooled scores).
LEAF_AND_LEVELS = "leaf and each level"
#: Computed from a model's scores (:mod:`hieval.metrics.ranking`, :mod:`hieval.metrics.tuning`).
SCORES = "scores"

FAMILY_TITLES = {"flat": "Flat", "set": "Set-based", "cophe": "CoPHE"}
TIDY_SCHEMA = {
    "model": pl.String,
    "family": pl.String,
    "level": pl.String,
    "average": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
}
#: The columns that identify a row of the tidy table, its value aside.
TIDY_KEY = ("model", "family", "level", "average", "metric")


@dataclass(frozen=True)
class Metric:
    """One kind of tidy row: what it is, where it comes from, and how it is computed.

    ``per_unit`` (label- and example-based metrics) maps the per-label or per-item arrays
    ``tp, fp, fn`` and the size ``n`` (items for labels, labels for items) to one value per unit;
    the metric is their mean, or, under the average ``micro``, the formula of the counts summed
    over the units with ``n`` the summed sizes (FPR micro = ΣFP / Σ(FP + TN)). ``per_document``
    (the ranking family's ``mean`` metrics) is the per-document statistic and the documents
    averaged over (:mod:`hieval.metrics.document_measures`). Other metrics are computed by
    their family's module: the count measures
    (:data:`hieval.metrics.count_measures.COUNT_MEASURES`) by :mod:`hieval.metrics.prf`, ICM
    and the item-set measures by :mod:`hieval.metrics.suite`.
    """

    family: str
    metric: str
    average: str
    level: str
    source: str
    formula: str
    paper: str | None = None
    higher_is_better: bool = True
    per_unit: Callable[..., np.ndarray] | None = None
    per_document: DocumentMean | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return self.family, self.average, self.metric


def ratio_or_one(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den elementwise, 1 where den is 0 (nothing to find and nothing found).

    Shapes broadcast: the bootstrap applies a ``per_unit`` formula to units × replicates at
    once (:mod:`hieval.metrics.uncertainty`), ``n`` then being one size per replicate.
    """
    return divide(num, den, zero_division=1.0)


PRF_AVERAGES = ("micro", "macro", "macro_hm")
#: The diagnosis and procedure parts of the count families (micro only), as the field reports them.
SPLIT_FAMILIES = tuple(f"{f}_{kind}" for kind in CODE_TYPES for f in FAMILIES)
COUNT_FAMILIES = (*FAMILIES, *SPLIT_FAMILIES)


def _prf(family: str, paper_f1: str | None = None) -> list[Metric]:
    """The tp/fp/fn/P/R/F1 rows of a count family under each of its averages."""
    level = LEAF if family.split("_")[0] == "flat" else EACH_LEVEL
    rows = []
    for average in ("micro",) if family in SPLIT_FAMILIES else PRF_AVERAGES:
        for metric, formula in (
            ("tp", "summed true positives"),
            ("fp", "summed false positives"),
            ("fn", "summed false negatives"),
            *((m.name, m.formula) for m in COUNT_MEASURES.values()),
        ):
            paper = paper_f1 if (average, metric) == ("micro", "f1") else None
            rows.append(Metric(family, metric, average, level, NODES, formula, paper))
    return rows


def _eb(tp, fp, fn, n):
    return ratio_or_one(2 * tp, 2 * tp + fp + fn)


def _exact(tp, fp, fn, n):
    """1 where the decided set is the gold (no FP, no FN), else 0: subset accuracy and the
    field's exact match are this one statistic."""
    return (fp + fn == 0).astype(np.float64)


def _fpr(tp, fp, fn, n):
    """FP / (FP + TN) with FP + TN = n - TP - FN, the unit's negatives (0 where it has none).

    Per label, ``n`` is the number of items; summed (``micro``), the cells of the label space,
    labels x items."""
    return divide(fp, n - tp - fn)


#: Every metric, in the tidy table's order (families, then averages, then metrics, each in order
#: of first appearance here).
REGISTRY: tuple[Metric, ...] = (
    *_prf("flat", "F-flat"),
    *_prf("set", "F-set"),
    *_prf("cophe", "F-CoPHE"),
    *(m for family in SPLIT_FAMILIES for m in _prf(family)),
    Metric(
        "icm", "icm", "mean", OVERALL, ITEMS,
        "mean over items of α1·IC(P) + α2·IC(G) − β·IC(P ∪ G), in bits", "ICM",
    ),
    Metric(
        "icm", "icm_norm", "mean", OVERALL, ITEMS,
        "max(0, (ICM + ICM(G,G)) / (2·ICM(G,G)))", "ICM-Norm",
    ),
    Metric(
        "label", "accuracy", "macro", LEAF, NODES,
        "mean over labels of (TP + TN) / N", "LB-ACC",
        per_unit=lambda tp, fp, fn, n: ratio_or_one(n - fp - fn, n + 0 * tp),
    ),
    Metric(
        "label", "f1", "macro", LEAF, NODES,
        "mean over labels of 2TP / (2TP + FP + FN)", "LB-F", per_unit=_eb,
    ),
    Metric(
        "label", "fpr", "macro", LEAF, NODES,
        "mean over labels of FP / (FP + TN), TN over the items (a loss)", "FPR-macro",
        higher_is_better=False, per_unit=_fpr,
    ),
    Metric(
        "label", "fpr", "micro", LEAF, NODES,
        "ΣFP / Σ(FP + TN) over the label set x items (a loss)", "FPR-micro",
        higher_is_better=False, per_unit=_fpr,
    ),
    Metric(
        "example", "precision", "mean", LEAF, DOCUMENTS,
        "mean over items of TP / (TP + FP)", "EB-P",
        per_unit=lambda tp, fp, fn, n: ratio_or_one(tp, tp + fp),
    ),
    Metric(
        "example", "recall", "mean", LEAF, DOCUMENTS,
        "mean over items of TP / (TP + FN)", "EB-R",
        per_unit=lambda tp, fp, fn, n: ratio_or_one(tp, tp + fn),
    ),
    Metric(
        "example", "f1", "mean", LEAF, DOCUMENTS,
        "mean over items of 2TP / (2TP + FP + FN)", "EB-F", per_unit=_eb,
    ),
    Metric(
        "example", "hamming_loss", "mean", LEAF, DOCUMENTS,
        "mean over items of (FP + FN) / |L| (a loss)", "EB-HAMM", higher_is_better=False,
        per_unit=lambda tp, fp, fn, n: divide(fp + fn, n + 0 * tp),
    ),
    Metric(
        "example", "jaccard", "mean", LEAF, DOCUMENTS,
        "mean over items of TP / (TP + FP + FN)", "EB-JACC",
        per_unit=lambda tp, fp, fn, n: ratio_or_one(tp, tp + fp + fn),
    ),
    Metric(
        "example", "subset_accuracy", "mean", LEAF, DOCUMENTS,
        "share of items with P = G", "EB-SUBACC", per_unit=_exact,
    ),
    Metric(
        "example", "exact_match", "mean", LEAF, DOCUMENTS,
        "share of items whose decided set equals the gold (EB-SUBACC's statistic)", "EM",
        per_unit=_exact,
    ),
    Metric(
        "propensity", "f1", "mean", LEAF, ITEMS,
        "mean over items of 2(W(P ∩ G) + w∅) / (W(P) + W(G) + 2w∅), W summing 1/propensity",
        "PROP-F",
    ),
    Metric(
        "hierarchical", "f1", "mean", OVERALL, ITEMS,
        "mean over items of 2|A(P) ∩ A(G)| / (|A(P)| + |A(G)|), ancestor-augmented sets",
        "HF",
    ),
    Metric(
        "lca", "f1", "mean", OVERALL, ITEMS,
        "mean over items of 2|P⁺ ∩ G⁺| / (|P⁺| + |G⁺|), each label augmented with its "
        "ancestors up to its LCA with the nearest label of the other set (Kosmopoulos et al.)",
        "LCA-F",
    ),
    Metric(
        "ranking", "auc", "micro", LEAF_AND_LEVELS, SCORES,
        "ROC-AUC over every (document, code) pair of the label space", "AUC-micro",
    ),
    Metric(
        "ranking", "auc", "macro", LEAF_AND_LEVELS, SCORES,
        "mean over codes with a positive and a negative document of their ROC-AUC",
        "AUC-macro",
    ),
    Metric(
        "ranking", "precision@{k}", "mean", LEAF_AND_LEVELS, SCORES,
        "mean over gold documents of gold codes among the K highest-scored / K", "P@K",
        per_document=DocumentMean(precision_at, ALL_DOCUMENTS),
    ),
    Metric(
        "ranking", "recall@{k}", "mean", LEAF_AND_LEVELS, SCORES,
        "mean over documents with gold codes of gold codes among the K highest-scored / |G|",
        "R@K", per_document=DocumentMean(recall_at, GOLD_DOCUMENTS),
    ),
    Metric(
        "ranking", "r_precision", "mean", LEAF_AND_LEVELS, SCORES,
        "mean over documents with gold codes of precision at K = |G|", "R-Prec",
        per_document=DocumentMean(r_precision, GOLD_DOCUMENTS),
    ),
    Metric(
        "ranking", "map", "mean", LEAF_AND_LEVELS, SCORES,
        "mean over documents with gold codes of average precision (ties one threshold)", "MAP",
        per_document=DocumentMean(average_precision, GOLD_DOCUMENTS),
    ),
    Metric(
        "ranking", "ndcg@{k}", "mean", LEAF_AND_LEVELS, SCORES,
        "mean over documents with gold codes of DCG@K / ideal DCG@K (binary gains, "
        "1/log2(rank + 1), ties by code)", "nDCG@K",
        per_document=DocumentMean(ndcg_at, GOLD_DOCUMENTS),
    ),
    Metric(
        "ranking", "psp@{k}", "mean", LEAF, SCORES,
        "Σ over documents of the inverse propensities of the gold codes among the K "
        "highest-scored / the same of the K best gold codes (pyxclib; Jain et al. "
        "propensities from the training gold)", "PSP@K",
        per_document=DocumentMean(ps_precision_at, ALL_DOCUMENTS, best=best_ps_precision_at),
    ),
    Metric(
        "ranking", "psndcg@{k}", "mean", LEAF, SCORES,
        "Σ over documents of propensity-weighted DCG@K / ideal DCG@K, over the same of the "
        "best ranking (pyxclib; propensities from the training gold)", "PSnDCG@K",
        per_document=DocumentMean(ps_ndcg_at, ALL_DOCUMENTS, best=best_ps_ndcg_at),
    ),
    Metric(
        "calibration", "brier", "micro", LEAF, SCORES,
        "mean over the label space of (score - gold)^2 (a loss)", "Brier",
        higher_is_better=False,
    ),
    Metric(
        "calibration", "ece", "micro", LEAF, SCORES,
        "sum over 15 equal-width bins of |mean gold - mean score| x share of pairs (a loss)",
        "ECE", higher_is_better=False,
    ),
    Metric(
        "calibration", "brier", "scored", LEAF, SCORES,
        "Brier over the scored pairs only (unscored pairs left out, not scored 0)",
        "Brier-scored", higher_is_better=False,
    ),
    Metric(
        "calibration", "ece", "scored", LEAF, SCORES,
        "ECE over the scored pairs only (unscored pairs left out, not scored 0)",
        "ECE-scored", higher_is_better=False,
    ),
    Metric(
        "selection", "threshold", "global", LEAF, SCORES,
        "the decision threshold tuned on the dev set (max dev flat micro-F1)",
    ),
)  # fmt: skip


def _first_seen(values) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


FAMILIES_ORDER = _first_seen(m.family for m in REGISTRY)
AVERAGES = _first_seen(m.average for m in REGISTRY)
METRICS = _first_seen(m.metric for m in REGISTRY)
#: The count metrics, integer-valued (``summary.csv`` writes them as integers).
COUNT_METRICS = ("tp", "fp", "fn")
#: The P/R/F1 metrics of the count families, in order.
PRF_METRICS = _first_seen(m.metric for m in REGISTRY if m.family in COUNT_FAMILIES)
#: Metrics computed by :mod:`hieval.metrics.suite` (ICM and the comparison metrics).
SUITE = tuple(m for m in REGISTRY if m.family not in COUNT_FAMILIES and m.source != SCORES)
#: Metrics computed from scores (ranking, calibration, the tuned threshold).
SCORE_METRICS = tuple(m for m in REGISTRY if m.source == SCORES)
#: The ranking metrics that are means over documents of a per-document statistic.
DOCUMENT_MEANS = tuple(m for m in REGISTRY if m.per_document is not None)
#: Paper names of the set metrics that have one, and whether higher is better (the meta
#: experiments, which score sets, test each of them; the score metrics' names are for reports).
PAPER_METRICS = {m.paper: m.higher_is_better for m in REGISTRY if m.paper and m.source != SCORES}
BY_PAPER = {m.paper: m for m in REGISTRY if m.paper and m.source != SCORES}


#: The headline rows, (heading, family, level, average, metric): summary.md gives them
#: intervals, tests and its system tables; the HTML leaderboard (:data:`LEADERBOARD`) shows them
#: among its columns. The one list of them.
#: The three count families' headline cells (family, level): flat at the leaves, set-based and
#: CoPHE pooled over the evaluated levels (the paper tables' and the subgroups' columns).
HEADLINE_FAMILIES = (("flat", LEAF), ("set", OVERALL), ("cophe", OVERALL))
HEADLINE = (
    ("Flat F1", "flat", LEAF, "micro", "f1"),
    ("Set-based F1", "set", OVERALL, "micro", "f1"),
    ("CoPHE F1", "cophe", OVERALL, "micro", "f1"),
    ("ICM", "icm", OVERALL, "mean", "icm"),
)
_FLAT_F1, _SET_F1, _COPHE_F1, _ICM = (tuple(key) for _, *key in HEADLINE)
#: The columns of the HTML report's leaderboard: (heading, family, level, average, metric);
#: the headline rows among them.
LEADERBOARD = (
    ("Flat P", "flat", LEAF, "micro", "precision"),
    ("Flat R", "flat", LEAF, "micro", "recall"),
    ("Flat F1", *_FLAT_F1),
    ("Flat macro F1", "flat", LEAF, "macro", "f1"),
    ("Set P", "set", OVERALL, "micro", "precision"),
    ("Set R", "set", OVERALL, "micro", "recall"),
    ("Set F1", *_SET_F1),
    ("CoPHE P", "cophe", OVERALL, "micro", "precision"),
    ("CoPHE R", "cophe", OVERALL, "micro", "recall"),
    ("CoPHE F1", *_COPHE_F1),
    ("CoPHE macro F1", "cophe", OVERALL, "macro", "f1"),
    ("ICM", *_ICM),
    ("ICM-Norm", "icm", OVERALL, "mean", "icm_norm"),
    ("Micro AUC", "ranking", LEAF, "micro", "auc"),
    ("Macro AUC", "ranking", LEAF, "macro", "auc"),
    ("P@5", "ranking", LEAF, "mean", "precision@5"),
    ("P@8", "ranking", LEAF, "mean", "precision@8"),
    ("P@15", "ranking", LEAF, "mean", "precision@15"),
    ("MAP", "ranking", LEAF, "mean", "map"),
)


_AT_K = re.compile(r"@[0-9]+$")


def template(metric: str) -> str:
    """A tidy metric name as the registry declares it: ``precision@5`` is ``precision@{k}``
    (the Ks come from config ``ranking.k``)."""
    return _AT_K.sub("@{k}", metric)


def at_k(metric: str, k: int) -> str:
    """A K-dependent metric's tidy name: ``precision@{k}`` at 5 is ``precision@5``."""
    return metric.replace("{k}", str(k))


def at_ks(metric: str, ks) -> list[tuple[str, int | None]]:
    """A metric's tidy names with their K: one per K of ``ks`` for a K-dependent metric
    (``precision@{k}``), else the name itself with K None."""
    return [(at_k(metric, k), k) for k in ks] if "{k}" in metric else [(metric, None)]


def _k_of(metric: str) -> int:
    found = _AT_K.search(metric)
    return int(found.group()[1:]) if found else 0


def lookup(family: str, average: str, metric: str) -> Metric:
    """The registered metric of a tidy row (its family, average and metric)."""
    for entry in REGISTRY:
        if entry.key == (family, average, template(metric)):
            return entry
    raise KeyError(f"no registered metric {family}/{average}/{metric}")


def paper_level(metric: Metric) -> str:
    """The level of a metric's headline row: ``overall`` for per-level families, ``leaf`` for
    the ranking metrics (their levels are max-pooled views of the same scores)."""
    if metric.level == LEAF_AND_LEVELS:
        return LEAF
    return OVERALL if metric.level == EACH_LEVEL else metric.level


def sort_tidy(
    tidy: pl.DataFrame, levels: tuple[str, ...], models: list[str] | None = None
) -> pl.DataFrame:
    """Order rows by model (sheet order), family, level (deep to high), average, metric, each in
    the registry's order (a K-dependent metric at its template's place, by K)."""
    orders = {
        "family": list(FAMILIES_ORDER),
        "level": [LEAF, *levels, OVERALL],
        "average": list(AVERAGES),
        "metric": list(METRICS),
    }
    if models is not None:
        orders["model"] = models
    keys = []
    for column, order in orders.items():
        rank = {v: i for i, v in enumerate(order)}
        values = pl.col(column)
        if column == "metric":
            values = values.str.replace(_AT_K.pattern, "@{k}")
        keys.append(values.replace_strict(rank, default=len(rank), return_dtype=pl.Int64))
        if column == "metric":
            keys.append(pl.col("metric").str.extract(r"@([0-9]+)$").cast(pl.Int64).fill_null(0))
    extra = [] if models is not None else [pl.col("model")]
    return tidy.sort([*extra, *keys, pl.col("family"), pl.col("level")], maintain_order=True)


def wide(tidy: pl.DataFrame) -> pl.DataFrame:
    """One row per (model, family, level, average) with a column per metric present, in the
    registry's order; the counts as integers. Every row keeps every value it has."""
    present = tidy["metric"].unique(maintain_order=True).to_list()
    # Registered metrics in the registry's order (K-dependent names by K); any other metric
    # after them, never dropped.
    columns = [
        name
        for m in METRICS
        for name in sorted((p for p in present if template(p) == m), key=_k_of)
    ]
    columns += [p for p in present if p not in columns]
    frame = tidy.pivot(
        on="metric",
        index=["model", "family", "level", "average"],
        values="value",
        maintain_order=True,
    )
    for column in columns:
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(column))
    counts = [c for c in COUNT_METRICS if c in columns]
    return frame.select("model", "family", "level", "average", *columns).with_columns(
        pl.col(counts).cast(pl.Int64)
    )
