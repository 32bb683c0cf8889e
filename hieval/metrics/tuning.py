"""Decision thresholds tuned on a validation (dev) set, as the ICD-coding literature tunes them.

Edin et al. (2023) tune one global threshold that maximises micro-F1 on the validation set; some
systems tune one per code. Both sweeps here are exact: every distinct dev score is a candidate
threshold t (a pair is predicted when its score is at least t), and F1 is computed from counts
at each, with the dev gold pairs the model did not score as false negatives at every t. Ties in
F1 go to the highest t (the fewest predictions for the same F1). F1 values are ratios of
integers, each correctly rounded, so equal F1s compare equal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import polars as pl

from hieval.metrics.arithmetic import divide
from hieval.metrics.count_measures import F1
from hieval.metrics.ranking import ScoreArrays, by_label

log = logging.getLogger(__name__)

DEFAULT_MIN_SUPPORT = 5
#: ``exact``: every distinct dev score is a candidate (hieval's sweep); ``grid``: Edin et al.'s
#: ``f1_score_db_tuning``, 100 evenly spaced thresholds from 0 to 1.
TUNING_METHODS = ("exact", "grid")
DEFAULT_METHOD = "exact"
GRID = np.linspace(0, 1, 100)
#: The dev curve kept for the report: every distinct threshold up to this many, else this many
#: thresholds evenly spaced in sweep order, plus the chosen one.
CURVE_POINTS = 10_000
#: The per-code thresholds file: the code, its threshold, its positive dev documents, its dev F1.
CODE_THRESHOLDS_SCHEMA = {
    "code": pl.String,
    "threshold": pl.Float64,
    "support": pl.Int64,
    "f1": pl.Float64,
}


def _sweep(scores: np.ndarray, positive_scores: np.ndarray, positives: int):
    """Candidate thresholds (distinct scores, ascending) with TP and FP at each."""
    ranked = np.sort(scores)
    if not len(ranked):
        return ranked, np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = np.flatnonzero(np.concatenate([[True], ranked[1:] != ranked[:-1]]))
    thresholds = ranked[first]
    at_least = len(ranked) - first
    which = np.searchsorted(thresholds, positive_scores)  # each positive's own threshold
    true_at = np.bincount(which, minlength=len(thresholds))
    tp = np.cumsum(true_at[::-1])[::-1]
    return thresholds, tp, at_least - tp


def _best(f1: np.ndarray) -> int:
    """Index of the highest F1, the highest threshold among equals (thresholds ascend)."""
    return len(f1) - 1 - int(np.argmax(f1[::-1]))


@dataclass(frozen=True)
class Tuned:
    """A tuned global threshold, its dev curve, and per-code thresholds (maybe none)."""

    threshold: float
    f1: float
    curve: pl.DataFrame
    per_code: pl.DataFrame


def global_threshold(arrays: ScoreArrays) -> tuple[float, float, pl.DataFrame]:
    """The threshold maximising flat micro-F1 on the dev pairs, its F1, and the curve."""
    found, index = arrays.gold_found()
    positives = len(arrays.gold_key)
    thresholds, tp, fp = _sweep(arrays.score, arrays.score[index[found]], positives)
    if not len(thresholds):
        raise ValueError("the dev predictions hold no scores to tune a threshold on")
    fn = positives - tp
    f1 = F1(tp, fp, fn)
    best = _best(f1)
    keep = np.arange(len(thresholds))
    if len(keep) > CURVE_POINTS:
        keep = np.unique(np.append(np.linspace(0, len(keep) - 1, CURVE_POINTS).astype(int), best))
    predicted = tp + fp
    curve = pl.DataFrame(
        {
            "threshold": thresholds[keep],
            "tp": tp[keep],
            "fp": fp[keep],
            "fn": fn[keep],
            "precision": divide(tp[keep], predicted[keep]),
            "recall": tp[keep] / positives if positives else np.zeros(len(keep)),
            "f1": f1[keep],
            "chosen": keep == best,
        }
    )
    return float(thresholds[best]), float(f1[best]), curve


def grid_threshold(arrays: ScoreArrays) -> tuple[float, float, pl.DataFrame]:
    """Edin et al.'s ``f1_score_db_tuning``: among the 100 thresholds of ``GRID``, the one
    whose decisions ``score > t`` give the highest dev micro-F1 ``tp / (tp + (fp + fn) / 2 +
    1e-10)``, the lowest among equals (torch's ``argmax`` takes the first). Returned as the
    next float above it, so hieval's ``score >= threshold`` decides exactly ``score > t``."""
    found, index = arrays.gold_found()
    positives = len(arrays.gold_key)
    if not len(arrays.score):
        raise ValueError("the dev predictions hold no scores to tune a threshold on")
    ranked = np.sort(arrays.score)
    positive_scores = np.sort(arrays.score[index[found]])
    above = len(ranked) - np.searchsorted(ranked, GRID, side="right")
    tp = len(positive_scores) - np.searchsorted(positive_scores, GRID, side="right")
    return grid_choice(above, tp, positives)


def grid_choice(
    above: np.ndarray, tp: np.ndarray, positives: int
) -> tuple[float, float, pl.DataFrame]:
    """The grid point of best F1 and the grid's curve, from the scores above each point
    (``above``) and the gold pairs among them (``tp``): one definition for long rows and a
    dense matrix's blocks (:mod:`hieval.metrics.blocked_tuning`)."""
    fp, fn = above - tp, positives - tp
    f1 = tp / (tp + 0.5 * (fp + fn) + 1e-10)
    best = int(np.argmax(f1))
    curve = pl.DataFrame(
        {
            "threshold": GRID,
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "precision": np.divide(tp, above, out=np.zeros(len(GRID)), where=above > 0),
            "recall": tp / positives if positives else np.zeros(len(GRID)),
            "f1": f1,
            "chosen": np.arange(len(GRID)) == best,
        }
    )
    threshold = float(GRID[best]) if GRID[best] >= 1 else float(np.nextafter(GRID[best], 2.0))
    return threshold, float(f1[best]), curve


def per_code_thresholds(arrays: ScoreArrays, *, min_support: int) -> pl.DataFrame:
    """``code, threshold, support, f1``: each code with at least ``min_support`` positive dev
    documents, at the threshold maximising its own F1 over its dev scores."""
    gold_label = arrays.gold_key % arrays.n_labels
    support = np.bincount(gold_label, minlength=arrays.n_labels)
    found, index = arrays.gold_found()
    pos_label, pos_score = gold_label[found], arrays.score[index[found]]
    order = np.argsort(pos_label, kind="stable")
    pos_label, pos_score = pos_label[order], pos_score[order]
    pos_starts = np.searchsorted(pos_label, np.arange(arrays.n_labels + 1))
    grouped, starts, _counts = by_label(arrays)
    rows = []
    for c in np.flatnonzero(support >= max(min_support, 1)):
        column = grouped[starts[c] : starts[c + 1]]
        own = pos_score[pos_starts[c] : pos_starts[c + 1]]
        thresholds, tp, fp = _sweep(column, own, int(support[c]))
        if not len(thresholds):
            continue  # gold but never scored: the global threshold it is
        f1 = F1(tp, fp, int(support[c]) - tp)
        best = _best(f1)
        rows.append((arrays.labels[c], float(thresholds[best]), int(support[c]), float(f1[best])))
    return pl.DataFrame(rows, schema=CODE_THRESHOLDS_SCHEMA, orient="row")


def tune(
    arrays: ScoreArrays,
    *,
    per_code: bool = False,
    min_support: int = DEFAULT_MIN_SUPPORT,
    method: str = DEFAULT_METHOD,
):
    """The global threshold (by the exact sweep, or Edin et al.'s grid with ``method``
    ``grid``) and, with ``per_code``, the per-code ones (exact sweeps; see module doc)."""
    sweep = grid_threshold if method == "grid" else global_threshold
    threshold, f1, curve = sweep(arrays)
    codes = (
        per_code_thresholds(arrays, min_support=min_support)
        if per_code
        else pl.DataFrame(schema=CODE_THRESHOLDS_SCHEMA)
    )
    log.info(
        "tuned threshold %.6g (dev micro-F1 %.4f); %d code(s) with their own",
        threshold,
        f1,
        codes.height,
    )
    return Tuned(threshold=threshold, f1=f1, curve=curve, per_code=codes)
