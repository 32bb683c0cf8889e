"""The ``edin`` and ``edin_mullenbach`` conventions: Edin et al., SIGIR 2023, ``src/metrics.py``
of JoakimEdin/medical-coding-reproducibility (Apache-2.0), as its ``reproducibility`` metric
configuration uses it; written from its definitions (the tests reimplement them from that code).

- ``edin`` (``filter_codes``): only the codes with a positive in the gold, and only the
  documents with one of those codes; ``edin_mullenbach``: every code of the label space and
  every document, each metric's name ending in ``_mullenbach``.
- Decisions are ``score > threshold`` (strict; hieval decides ``score >= threshold``).
- ``f1``: ``tp / (tp + (fp + fn) / 2 + 1e-10)``; ``precision``, ``recall``, ``fpr`` with the same
  ``1e-10`` guard; ``_micro`` over summed counts, ``_macro`` the mean over codes.
- ``exact_match_ratio``: documents whose decided row equals the gold row.
- ``precision@K`` (K = 1, 5, 8, 15): hits among the K highest scores / (K + 1e-10);
  ``recall@K`` (K = 10, 15): hits / (gold count + 1e-10); ``precision@recall`` (R-precision)
  and ``map``, each averaged over the documents (NaN for a document without gold, as there).
  Ties in the scores are ordered by code (torch's sort leaves them unspecified).
- ``auc_micro``, ``auc_macro``: every code and every document in both conventions, because its
  ``MetricCollection.compute`` recomputes the AUCs unfiltered after the filtered ones; macro
  over the codes with a positive.
"""

from __future__ import annotations

import numpy as np

from hieval.conventions.matrix import Matrices

GUARD = 1e-10
PRECISION_KS = (1, 5, 8, 15)
RECALL_KS = (10, 15)


def _counts(y: np.ndarray, pred: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "tp": (pred & y).sum(axis=0).astype(float),
        "fp": (pred & ~y).sum(axis=0).astype(float),
        "fn": (~pred & y).sum(axis=0).astype(float),
        "tn": (~pred & ~y).sum(axis=0).astype(float),
    }


def _averaged(num: np.ndarray, den: np.ndarray) -> dict[str, float]:
    """Micro (summed counts) and macro (mean per code) of ``num / (den + 1e-10)``."""
    with np.errstate(invalid="ignore"):
        macro = float(np.mean(num / (den + GUARD))) if num.size else float("nan")
    return {"micro": float(num.sum() / (den.sum() + GUARD)), "macro": macro}


def decision_metrics(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """F1, precision, recall and FPR (micro and macro) and the exact match ratio."""
    c = _counts(y, pred)
    out = {}
    for name, num, den in (
        ("f1", c["tp"], c["tp"] + 0.5 * (c["fp"] + c["fn"])),
        ("recall", c["tp"], c["tp"] + c["fn"]),
        ("precision", c["tp"], c["tp"] + c["fp"]),
        ("fpr", c["fp"], c["fp"] + c["tn"]),
    ):
        for average, value in _averaged(num, den).items():
            out[f"{name}_{average}"] = value
    rows = pred.shape[0]
    exact = (pred == y).all(axis=1).sum() if rows else 0
    out["exact_match_ratio"] = float(exact / rows) if rows else float("nan")
    return out


def ranking_metrics(y: np.ndarray, raw: np.ndarray) -> dict[str, float]:
    """precision@K, recall@K, precision@recall and map of the scores ``raw``."""
    out = {}
    if y.shape[0] == 0:
        return out
    order = np.argsort(-raw, axis=1, kind="stable")  # highest first, ties by code
    ranked = np.take_along_axis(y, order, axis=1).astype(float)
    hits = np.cumsum(ranked, axis=1)
    gold = y.sum(axis=1).astype(float)
    for k in PRECISION_KS:
        if k <= y.shape[1]:  # torch.topk refuses a K beyond the codes
            out[f"precision@{k}"] = float(np.mean(hits[:, k - 1] / (k + GUARD)))
    for k in RECALL_KS:
        if k <= y.shape[1]:
            out[f"recall@{k}"] = float(np.mean(hits[:, k - 1] / (gold + GUARD)))
    with np.errstate(invalid="ignore", divide="ignore"):
        at_r = hits[np.arange(len(gold)), gold.astype(np.int64) - 1] / gold
        precision = hits / np.arange(1, y.shape[1] + 1)
        average_precision = (precision * ranked).sum(axis=1) / ranked.sum(axis=1)
    out["map"] = float(np.mean(average_precision))
    out["precision@recall"] = float(np.mean(at_r))
    return out


def edin_metrics(m: Matrices, pred: np.ndarray, *, filter_codes: bool) -> dict[str, float]:
    """One model's metrics under ``edin`` (``filter_codes``) or ``edin_mullenbach``, its
    decisions ``pred`` (documents x labels, ``score > threshold``)."""
    y, raw = m.y, m.raw
    if filter_codes:
        codes = y.any(axis=0)
        docs = y[:, codes].any(axis=1)
        y, pred = y[np.ix_(docs, codes)], pred[np.ix_(docs, codes)]
        raw = None if raw is None else raw[np.ix_(docs, codes)]
    out = decision_metrics(y, pred)
    if raw is not None:
        out.update(ranking_metrics(y, raw))
        aucs = m.aucs  # unfiltered, as its last update computes them
        out.update(auc_micro=aucs["auc_micro"], auc_macro=aucs["auc_macro"])
    if filter_codes:
        return out
    return {f"{name}_mullenbach": value for name, value in out.items()}
