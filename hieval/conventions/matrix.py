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

from hieval.inputs.dense_scores import DenseScores


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
        # The exact Mann-Whitney counts of hieval.metrics.blocked (integers, then :func:`auc`'s
        # one division), a block of documents at a time: the same floats as :func:`auc` per
        # column and flattened, without an argsort per label.
        from hieval.metrics.blocked import blocked_aucs  # compiled (numba): loaded when used

        found = blocked_aucs(self.raw, *np.nonzero(self.y))
        per_label = found.per_label[np.flatnonzero(self.y.any(0))]
        defined = [float(value) for value in per_label if not np.isnan(value)]
        return {
            "auc_macro": float(np.mean(defined)) if defined else float("nan"),
            "auc_micro": float("nan") if found.micro is None else found.micro,
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
    placed = frame.join(rows, on="doc_id", how="left", maintain_order="none").join(
        cols, on="code", how="left", maintain_order="none"
    )  # each pair is set where it belongs, in any order
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
    dense: DenseScores | None = None,
) -> Matrices:
    """The matrices of one model over the gold's documents and ``labels``; a ``dense`` model's
    scores are copied from its matrix (``scores`` is then empty), never made long rows."""
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
    if dense is not None:
        raw = _dense_raw(dense, docs, labels)
    elif scores.height:
        raw = np.zeros(shape, dtype=np.float64)
        _fill(scores, doc_index, label_index, raw, values="score")
    return Matrices(list(docs), list(labels), y, yhat, raw, outside)


def _dense_raw(dense: DenseScores, docs: Sequence[str], labels: Sequence[str]) -> np.ndarray:
    """``raw`` from a dense model's matrix: the cells of its kept rows and columns that fall
    on the gold's documents and ``labels`` (as float64, as the long scores hold them), 0
    elsewhere; copied a block of rows at a time."""
    matrix = dense.matrix()
    doc_at = {d: i for i, d in enumerate(docs)}
    label_at = {c: j for j, c in enumerate(labels)}
    rows = [(i, doc_at[d]) for i, d in enumerate(dense.docs) if d is not None and d in doc_at]
    cols = [(j, label_at[c]) for j, c in enumerate(dense.codes) if c is not None and c in label_at]
    raw = np.zeros((len(docs), len(labels)), dtype=np.float64)
    if not rows or not cols:
        return raw
    source_rows, target_rows = (np.array(v, dtype=np.int64) for v in zip(*rows, strict=True))
    source_cols, target_cols = (np.array(v, dtype=np.int64) for v in zip(*cols, strict=True))
    for start in range(0, len(source_rows), 1024):
        block = np.asarray(matrix[source_rows[start : start + 1024]])[:, source_cols]
        block = np.where(block == -np.inf, 0.0, block)  # unscored: 0, as the long scores fill
        raw[target_rows[start : start + 1024, None], target_cols] = block
    return raw


def auc(truth: np.ndarray, scores: np.ndarray) -> float:
    """ROC-AUC of ``scores`` against the booleans ``truth``: the Mann-Whitney statistic with
    average ranks for ties, which is the area under scikit-learn's ``roc_curve`` (trapezoids);
    NaN without a positive or without a negative, where ``roc_curve`` has no area either."""
    positives = int(truth.sum())
    negatives = truth.size - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    # A positive's doubled average rank (1-based) is (scores below it) + (scores at most it)
    # + 1: integers, summed exactly. The matrix is mostly unscored zeros, so only the other
    # scores are sorted, and the zeros are counted in where they rank (the flattened matrix
    # of the micro AUC would otherwise be a sort of documents x labels).
    nonzero = scores[scores != 0]
    zeros = scores.size - nonzero.size
    ordered = np.sort(nonzero)
    value = scores[truth]
    below = np.searchsorted(ordered, value, side="left") + zeros * (value > 0)
    at_most = np.searchsorted(ordered, value, side="right") + zeros * (value >= 0)
    rank_sum = int((below + at_most + 1).sum(dtype=np.int64))
    return (rank_sum - positives * (positives + 1)) / (2 * positives * negatives)
