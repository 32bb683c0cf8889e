"""A dense score matrix's decisions a block of documents at a time: the (row, column) pairs a
threshold, per-code thresholds and/or top-k keep, as today's normalisation keeps them
(``_select_by_score`` in :mod:`hieval.inputs.normalize`), without expanding the matrix to long
rows. Normalisation hands these few pairs (about the gold's size) to its usual long-table path;
the matrix itself is never copied whole (a memory-mapped ``.npy`` is read block by block).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Documents per block: 1,024 x 7,900 float32 is 32 MB.
BLOCK_DOCS = 1024
#: Documents per block, from the environment for the tests (blocks of 1 and 7 must give the
#: same rows); :data:`BLOCK_DOCS` otherwise. Here, in a module without numba, so that the
#: pre-read plans (:func:`hieval.resources.input_shape`) read it without loading the kernels.
BLOCK_DOCS_VARIABLE = "HIEVAL_DENSE_BLOCK_DOCS"
#: The cell of a matrix pivoted from a long file that scores most pairs but not all
#: (:mod:`hieval.inputs.dense_long`) where the file has no score: below every score, as the
#: long path ranks an unscored pair; never decided. A matrix read as given never holds it
#: (its non-finite cells are refused).
UNSCORED = -np.inf


class NonFiniteCell(ValueError):
    """A cell that is NaN or infinite, at ``row``, ``col`` (0-based) of the matrix; the reader
    names the file, the document and the code."""

    def __init__(self, row: int, col: int, value: float) -> None:
        super().__init__(f"score {value!r} at row {row + 1}, column {col + 1} is not finite")
        self.row, self.col, self.value = row, col, value


def check_finite(block: np.ndarray, start: int, *, unscored: bool = False) -> None:
    """Refuse the block's first non-finite cell (``start``: the block's first row); with
    ``unscored``, :data:`UNSCORED` cells are taken."""
    finite = np.isfinite(block)
    if unscored:
        finite |= block == UNSCORED
    if not finite.all():
        row, col = (int(i) for i in np.argwhere(~finite)[0])
        raise NonFiniteCell(start + row, col, float(block[row, col]))


@dataclass(frozen=True)
class Decided:
    """The decided (row, column) pairs of a score matrix, sorted, with what the input record
    counts: cells below their threshold, and cells over the threshold outside the top k."""

    rows: np.ndarray
    cols: np.ndarray
    below_threshold: int
    outside_top_k: int


def decided_pairs(
    matrix: np.ndarray,
    *,
    threshold: float | None = None,
    code_thresholds: np.ndarray | None = None,
    top_k: int | None = None,
    code_order: np.ndarray | None = None,
    block_docs: int = BLOCK_DOCS,
    unscored: bool = False,
) -> Decided:
    """What normalisation's selection keeps of a dense matrix (``_select_by_score`` in
    :mod:`hieval.inputs.normalize`), a block of documents at a time: cells scoring at least
    their column's threshold (``code_thresholds[column]``, NaN for "the global one") or
    ``threshold``, and of those each row's ``top_k`` highest, ties by code
    (``code_order[column]``: the column's rank in code order; identity when None).

    With ``unscored``, the :data:`UNSCORED` cells are not scored pairs: never decided, nor
    counted below the threshold or outside the top k (the long path has no row for them).

    The count engine then receives these pairs, never the matrix's every cell.
    """
    n_docs, width = matrix.shape
    order_of = np.arange(width) if code_order is None else np.asarray(code_order, np.int64)
    by_code = np.argsort(order_of, kind="stable")
    limit = None
    if threshold is not None or code_thresholds is not None:
        limit = np.full(width, np.nan if threshold is None else threshold, dtype=np.float64)
        if code_thresholds is not None:
            own = np.asarray(code_thresholds, dtype=np.float64)
            limit = np.where(np.isnan(own), limit, own)
        limit = np.where(np.isnan(limit), -np.inf, limit)  # no threshold for that column
    all_rows, all_cols = [], []
    below = outside = 0
    for start in range(0, n_docs, block_docs):
        block = np.asarray(matrix[start : start + block_docs])
        check_finite(block, start, unscored=unscored)
        scored = block != UNSCORED if unscored else np.ones(block.shape, dtype=bool)
        kept = scored if limit is None else scored & (block >= limit)
        below += int(np.count_nonzero(scored) - np.count_nonzero(kept))
        if top_k is not None:
            top = _top_k(block, kept, top_k, by_code)
            outside += int(np.count_nonzero(kept) - np.count_nonzero(top))
            kept = top
        r, c = np.nonzero(kept)
        all_rows.append(r + start)
        all_cols.append(c)
    rows = np.concatenate(all_rows) if all_rows else np.zeros(0, dtype=np.int64)
    cols = np.concatenate(all_cols) if all_cols else np.zeros(0, dtype=np.int64)
    return Decided(rows, cols, below, outside)


def _top_k(block: np.ndarray, kept: np.ndarray, k: int, by_code: np.ndarray) -> np.ndarray:
    """Of each row's ``kept`` cells, the ``k`` highest-scored, ties by code: every cell above
    the row's k-th highest score, then the cells at it in code order until k are taken."""
    candidates = np.where(kept, block, -np.inf)
    width = block.shape[1]
    if k >= width:
        return kept.copy()
    kth = -np.partition(-candidates, k - 1, axis=1)[:, k - 1 : k]  # the k-th highest score
    above = kept & (candidates > kth)
    at = kept & (candidates == kth)
    room = k - above.sum(axis=1, keepdims=True)
    taken = np.cumsum(at[:, by_code], axis=1) <= room  # tied cells, in code order
    tied = np.zeros_like(at)
    tied[:, by_code] = at[:, by_code] & taken
    return above | tied
