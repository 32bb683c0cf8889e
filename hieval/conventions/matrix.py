"""The normalised long tables as the dense (document x label) matrices the reference code of
CAML and Edin et al. works on.

Those tools hold a model's output as one row per document and one column per label of the
model's label space, so their averages run over that label space, unscored pairs included. To
give their numbers, the conventions build the same matrices: rows are the gold's documents (a
gold document without predictions is an empty prediction, as everywhere in hieval), columns
the label space, in code order.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl


@dataclass(frozen=True)
class Matrices:
    """``y`` (gold), ``yhat`` (decided) as booleans and ``raw`` (scores; 0 where a pair is
    unscored, as CAML's ``metrics_from_dicts`` fills them) as float64, all documents x labels;
    ``raw`` is None for a model without scores. ``outside`` counts the gold and the decided
    pairs whose code is not in the label space (left out, as the reference tools cannot hold
    them)."""

    docs: list[str]
    labels: list[str]
    y: np.ndarray
    yhat: np.ndarray
    raw: np.ndarray | None
    outside: dict[str, int]

    @functools.cached_property
    def aucs(self) -> dict[str, float]:
        """``auc_micro`` (the flattened matrix) and ``auc_macro`` (the mean over the labels
        with a positive and a defined AUC): CAML's and Edin et al.'s definitions agree, so
        the conventions share one computation (the costliest of them)."""
        per_label = [auc(self.y[:, j], self.raw[:, j]) for j in np.flatnonzero(self.y.any(0))]
        defined = [value for value in per_label if not np.isnan(value)]
        return {
            "auc_macro": float(np.mean(defined)) if defined else float("nan"),
            "auc_micro": auc(self.y.ravel(), self.raw.ravel()),
        }


def documents(gold: pl.DataFrame) -> list[str]:
    """The gold's documents, sorted (a document declared without labels included)."""
    return sorted(gold["doc_id"].unique().to_list())


def observed_labels(gold: pl.DataFrame, decided: pl.DataFrame) -> list[str]:
    """The codes of the gold or the decided predictions: the label space when the model's own
    list is not given."""
    codes = pl.concat([_codes(gold), _codes(decided)]).unique()
    return sorted(codes.to_list())


def _codes(frame: pl.DataFrame) -> pl.Series:
    codes = frame["code"]
    return codes.filter(codes.is_not_null() & (codes != ""))


def _fill(
    frame: pl.DataFrame,
    rows: pl.DataFrame,
    cols: pl.DataFrame,
    matrix: np.ndarray,
    values: str | None = None,
) -> int:
    """Set the matrix cells of ``frame``'s pairs (to True, or to the column ``values``), the
    row and column of a pair found by joins on ``rows`` (``doc_id, row``) and ``cols``
    (``code, col``); return how many pairs with a code were outside the label space."""
    frame = frame.filter(pl.col("code").is_not_null() & (pl.col("code") != ""))
    placed = frame.join(rows, on="doc_id", how="left").join(cols, on="code", how="left")
    inside = placed.filter(pl.col("row").is_not_null() & pl.col("col").is_not_null())
    r, c = inside["row"].to_numpy(), inside["col"].to_numpy()
    matrix[r, c] = True if values is None else inside[values].to_numpy()
    return placed.filter(pl.col("col").is_null()).height


def matrices(
    gold: pl.DataFrame,
    decided: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    labels: Sequence[str],
) -> Matrices:
    """The matrices of one model over the gold's documents and ``labels``."""
    docs = documents(gold)
    doc_index = pl.DataFrame(
        {"doc_id": docs, "row": np.arange(len(docs))}, schema_overrides={"doc_id": pl.String}
    )
    label_index = pl.DataFrame(
        {"code": list(labels), "col": np.arange(len(labels))}, schema_overrides={"code": pl.String}
    )
    shape = (len(docs), len(labels))
    y = np.zeros(shape, dtype=bool)
    yhat = np.zeros(shape, dtype=bool)
    outside = {
        "gold": _fill(gold, doc_index, label_index, y),
        "predictions": _fill(decided, doc_index, label_index, yhat),
    }
    raw = None
    if scores.height:
        raw = np.zeros(shape, dtype=np.float64)
        _fill(scores, doc_index, label_index, raw, values="score")
    return Matrices(list(docs), list(labels), y, yhat, raw, outside)


def auc(truth: np.ndarray, scores: np.ndarray) -> float:
    """ROC-AUC of ``scores`` against the booleans ``truth``: the Mann-Whitney statistic with
    average ranks for ties, which is the area under scikit-learn's ``roc_curve`` (trapezoids);
    NaN without a positive or without a negative, where ``roc_curve`` has no area either."""
    positives = int(truth.sum())
    negatives = truth.size - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    ordered = scores[order]
    # doubled average ranks (1-based) of each run of tied scores: integers, summed exactly
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    doubled = np.repeat(starts + ends + 1, ends - starts)
    rank_sum = int(doubled[truth[order]].sum())
    return (rank_sum - positives * (positives + 1)) / (2 * positives * negatives)
