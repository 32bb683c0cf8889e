"""Decision thresholds tuned on a dense dev matrix by blocks of documents (issue 36): what
:func:`hieval.metrics.tuning.tune` gives on the matrix's long rows (threshold, dev F1, the
dev curve, the per-code thresholds), to the last bit, without building those rows.

Why: the long path indexes every dev cell (MIMIC-IV's dev split is millions of cells per
model) by string joins and sorts them all at once. Here the matrix stays memory mapped and is
read a block of documents at a time; what crosses blocks is small: the gold pairs' scores and
integer counts at candidate thresholds.

Why only the gold pairs' scores are candidates for the best threshold (exact sweeps, global and
per code): between two consecutive distinct gold scores TP is constant and FP falls as the
threshold rises, so F1 is highest at the upper one; any other score ties the best F1 only where
a gold score above it does too, and the tie rule takes the highest. Above the highest gold
score F1 is 0, so without a scored gold pair the highest score wins (the tie rule again). The
F1 values are the same integer ratios ``tuning`` computes, so the same floats.

The dev curve of the exact sweep samples every distinct score: the distinct scores are
collected block by block (each block's own distinct values, then one ``np.unique``: at most the
matrix's size, in its own dtype), and a second read counts the cells at or above each sampled
one. The grid method's 100 thresholds are counted per block by ``searchsorted``.

A matrix pivoted from a long dev file that scores most pairs but not all holds ``-inf`` where
the file has no row (:data:`hieval.inputs.dense_decisions.UNSCORED`): such a cell is below
every threshold, so it is never counted at or above one, as the long path, which has no row
for it, never counts it; a gold pair on such a cell is a gold pair the model did not score
(no candidate), and ``-inf`` is no distinct score of the dev curve.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from hieval.inputs.dense_decisions import UNSCORED
from hieval.inputs.dense_scores import DenseScores
from hieval.metrics import tuning
from hieval.metrics.arithmetic import divide
from hieval.metrics.blocked_rows import DenseModel, block_docs
from hieval.metrics.column_counts import ColumnCounts
from hieval.metrics.count_measures import F1
from hieval.metrics.tuning import CODE_THRESHOLDS_SCHEMA, CURVE_POINTS, GRID, Tuned, grid_choice


class _DevMatrix:
    """The dev matrix's kept cells (``view``: gold documents x kept codes) with the dev gold
    as integer pairs, and the scored gold pairs' scores (``values``, in the matrix's dtype)."""

    def __init__(self, scores: DenseScores, gold: pl.DataFrame, block: int) -> None:
        model = DenseModel(scores, gold)
        self.view, self.labels, self.block = model.view, model.labels, block
        self.n_rows, self.width = model.view.shape
        self.scored = model.scored  # the view's cells less its unscored ones
        self.gold_cols = model.gold_cols
        self.positives = len(model.gold_rows)
        scored = (model.gold_rows < self.n_rows) & (model.gold_cols < self.width)
        self.rows, self.cols = model.gold_rows[scored], model.gold_cols[scored]
        order = np.lexsort((self.cols, self.rows))
        self.rows, self.cols = self.rows[order], self.cols[order]
        self.values = np.empty(len(self.rows), dtype=model.view.dtype)
        self.column_max = np.full(self.width, -np.inf)
        bounds = np.searchsorted(self.rows, [*self.starts(), self.n_rows])
        for number, (start, cells) in enumerate(self.blocks()):
            a, b = bounds[number], bounds[number + 1]
            self.values[a:b] = cells[self.rows[a:b] - start, self.cols[a:b]]
            self.column_max = np.maximum(self.column_max, cells.max(axis=0))
        if model.unscored:  # gold pairs on unscored cells are not scored ones
            kept = self.values != UNSCORED
            self.rows, self.cols, self.values = self.rows[kept], self.cols[kept], self.values[kept]

    def starts(self) -> range:
        return range(0, self.n_rows, self.block)

    def blocks(self):
        """``(first row, block)`` for each block of documents, read from the memory map."""
        for start in self.starts():
            yield start, np.asarray(self.view[start : start + self.block])

    def at_least(self, thresholds: np.ndarray) -> np.ndarray:
        """The cells scoring at least each threshold (ascending, in the matrix's dtype)."""
        below = np.zeros(len(thresholds), dtype=np.int64)
        for _, cells in self.blocks():
            below += np.searchsorted(np.sort(cells, axis=None), thresholds, side="left")
        return self.view.size - below

    def tp_at_least(self, thresholds: np.ndarray) -> np.ndarray:
        """The scored gold pairs scoring at least each threshold."""
        ranked = np.sort(self.values)
        return len(ranked) - np.searchsorted(ranked, thresholds, side="left")


def dense_tune(
    gold: pl.DataFrame,
    scores: DenseScores,
    *,
    per_code: bool = False,
    min_support: int = tuning.DEFAULT_MIN_SUPPORT,
    method: str = tuning.DEFAULT_METHOD,
    block: int | None = None,
) -> Tuned:
    """:func:`hieval.metrics.tuning.tune` of the dev gold ``gold`` (``doc_id, code``) and the
    dense dev scores ``scores``, by blocks of ``block`` documents (see the module)."""
    dev = _DevMatrix(scores, gold, block or block_docs())
    if not dev.scored:
        raise ValueError("the dev predictions hold no scores to tune a threshold on")
    sweep = _grid_threshold if method == "grid" else _global_threshold
    threshold, f1, curve = sweep(dev)
    codes = (
        _per_code_thresholds(dev, min_support=min_support)
        if per_code
        else pl.DataFrame(schema=CODE_THRESHOLDS_SCHEMA)
    )
    tuning.log.info(
        "tuned threshold %.6g (dev micro-F1 %.4f); %d code(s) with their own (by blocks)",
        threshold, f1, codes.height,
    )  # fmt: skip
    return Tuned(threshold=threshold, f1=f1, curve=curve, per_code=codes)


def _global_threshold(dev: _DevMatrix) -> tuple[float, float, pl.DataFrame]:
    """:func:`hieval.metrics.tuning.global_threshold`: the best among the gold scores, the
    curve at every distinct score (up to :data:`CURVE_POINTS` of them, evenly sampled)."""
    distinct = _distinct(dev)
    sampled = np.arange(len(distinct))
    if len(sampled) > CURVE_POINTS:
        sampled = np.unique(np.linspace(0, len(sampled) - 1, CURVE_POINTS).astype(int))
    candidates = np.unique(dev.values)
    counted = np.union1d(candidates, distinct[sampled])  # one more read counts them all
    at_least = dev.at_least(counted)
    if len(candidates):
        tp = dev.tp_at_least(candidates)
        f1 = F1(tp, at_least[np.searchsorted(counted, candidates)] - tp, dev.positives - tp)
        chosen = candidates[tuning._best(f1)]
    else:  # no gold pair is scored: F1 is 0 everywhere, the highest score wins
        chosen = distinct[-1]
    best = int(np.searchsorted(distinct, chosen))
    keep = np.unique(np.append(sampled, best))
    thresholds = distinct[keep]
    tp = dev.tp_at_least(thresholds)
    predicted = at_least[np.searchsorted(counted, thresholds)]
    fp, fn = predicted - tp, dev.positives - tp
    f1 = F1(tp, fp, fn)
    positives = dev.positives
    curve = pl.DataFrame(
        {
            "threshold": thresholds.astype(np.float64),
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "precision": divide(tp, predicted),
            "recall": tp / positives if positives else np.zeros(len(keep)),
            "f1": f1,
            "chosen": keep == best,
        }
    )
    return float(distinct[best]), float(f1[keep == best][0]), curve


def _distinct(dev: _DevMatrix) -> np.ndarray:
    """Every distinct score, ascending (``np.unique`` of the matrix): each block's own
    written into one array of the matrix's size and dtype, then sorted in place."""
    merged = np.empty(dev.view.size, dtype=dev.view.dtype)
    filled = 0
    for _, cells in dev.blocks():
        own = np.unique(cells)
        merged[filled : filled + len(own)] = own
        filled += len(own)
    merged = merged[:filled]
    merged = merged[merged != UNSCORED]  # no score: not on the curve
    merged.sort()
    first = np.empty(len(merged), dtype=bool)
    first[:1] = True
    np.not_equal(merged[1:], merged[:-1], out=first[1:])
    return merged[first]


def _grid_threshold(dev: _DevMatrix) -> tuple[float, float, pl.DataFrame]:
    """:func:`hieval.metrics.tuning.grid_threshold`: the cells above each of the 100
    thresholds counted per block (each cell's count of grid thresholds below it)."""
    below = np.zeros(len(GRID) + 1, dtype=np.int64)
    for _, cells in dev.blocks():
        where = np.searchsorted(GRID, cells.astype(np.float64, copy=False).ravel(), side="left")
        below += np.bincount(where, minlength=len(GRID) + 1)
    above = dev.view.size - np.cumsum(below)[:-1]  # cells > GRID[j]: those with > j below
    ranked = np.sort(dev.values.astype(np.float64))
    tp = len(ranked) - np.searchsorted(ranked, GRID, side="right")
    return grid_choice(above, tp, dev.positives)


def _per_code_thresholds(dev: _DevMatrix, *, min_support: int) -> pl.DataFrame:
    """:func:`hieval.metrics.tuning.per_code_thresholds`: each column's cells below each of
    its gold scores counted by one merge per block (:class:`ColumnCounts`)."""
    n_labels = len(dev.labels)
    support = np.bincount(dev.gold_cols, minlength=n_labels)
    counts = ColumnCounts(dev.cols, dev.values, dev.width)
    for _, cells in dev.blocks():
        counts.add(cells)
    below, _ = counts.counts()
    order = np.lexsort((dev.values, dev.cols))
    cols, values, below = dev.cols[order], dev.values[order], below[order]
    starts = np.searchsorted(cols, np.arange(dev.width + 1))
    rows = []
    eligible = np.flatnonzero(support[: dev.width] >= max(min_support, 1)) if dev.n_rows else []
    for c in eligible:
        own, own_below = values[starts[c] : starts[c + 1]], below[starts[c] : starts[c + 1]]
        positives = int(support[c])
        if len(own):
            candidates, first = np.unique(own, return_index=True)
            tp = len(own) - first  # own is ascending: the positives at or above each
            at_least = dev.n_rows - own_below[first]
            f1 = F1(tp, at_least - tp, positives - tp)
            best = tuning._best(f1)
            threshold, value = float(candidates[best]), float(f1[best])
        else:  # its gold documents have no row: F1 is 0 everywhere, the highest score wins
            threshold = float(dev.column_max[c])
            value = float(F1(np.zeros(1, np.int64), np.ones(1, np.int64), positives)[0])
        rows.append((dev.labels[c], threshold, positives, value))
    rows.sort(key=lambda row: row[0])  # code order, as the long path's label order
    return pl.DataFrame(rows, schema=CODE_THRESHOLDS_SCHEMA, orient="row")
