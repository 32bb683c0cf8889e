"""A dense documents x codes score matrix read in blocks of documents (a memory-mapped
``.npy`` is never copied whole): its decisions (threshold, per-code thresholds, top-k) as the
pairs the count engine takes, and its ranking metrics — exact micro and macro ROC-AUC and
every gold pair's place in its document's ranking (P@K, R@K, R-precision, MAP, nDCG@K) — at
the leaves and at max-pooled levels of the hierarchy.

Why: a dense matrix (MIMIC-IV ICD-10: 19,802 x 7,900 = 157M scores) expanded to long rows and
sorted whole costs minutes and tens of GB (issue 36). Yet every ranking metric is a statement
about the *gold* pairs only (:mod:`hieval.metrics.ranking` says so too): a positive's
Mann-Whitney rank is the number of scores below it plus half the scores tied with it, and
those counts add up over any partition of the documents; a gold pair's place in its document
needs its document's row alone. So each block of documents is sorted (flattened for micro,
per column for macro, per row for the documents) and every gold pair is located in it by
binary search; the counts are integers, summed exactly over the blocks, and the final
arithmetic is :mod:`hieval.metrics.ranking`'s, so the results equal its rows to the last bit
(tests/test_blocked.py checks that, and scikit-learn, and hand-worked cases).

Memory: the block being sorted (``block_docs`` x codes, twice) plus a few integers per gold
pair; time: one sort of each block's cells per use and a binary search per gold pair.

A prototype, not wired into the CLI: its scope (what :func:`hieval.metrics.ranking.encode`
handles beyond it is listed in ``benchmarks/DENSE_PLAN.md``): the matrix's rows are the
documents in the gold's document order and its columns the label space, every cell scored
and finite; the gold are (row, column) pairs inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hieval.metrics.arithmetic import exact_mean
from hieval.metrics.document_measures import DocumentRanks, RankedDocuments
from hieval.metrics.registry import DOCUMENT_MEANS, at_ks

#: Documents per block: 1,024 x 7,900 float32 is 32 MB, sorted twice.
DEFAULT_BLOCK_DOCS = 1024


@dataclass(frozen=True)
class BlockedAucs:
    """The AUCs of one matrix: ``micro`` over every cell (None without a positive or a
    negative), ``per_label`` each column's AUC over the documents (NaN where the column has no
    positive or no negative), and ``macro`` their exact mean over the defined ones."""

    micro: float | None
    per_label: np.ndarray

    @property
    def macro(self) -> float | None:
        defined = self.per_label[~np.isnan(self.per_label)]
        return exact_mean(defined.tolist()) if len(defined) else None


def _auc(doubled_ranks: int, positives: int, negatives: int) -> float:
    """Mann-Whitney (R+ - P(P+1)/2) / (P N), R+ given doubled: the arithmetic of
    :func:`hieval.metrics.ranking._auc`, so equal integers give equal bits."""
    return (doubled_ranks - positives * (positives + 1)) / (2 * positives * negatives)


def _checked_gold(
    shape: tuple[int, int], rows: np.ndarray, cols: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Gold pairs as int64, sorted by (row, column) and unique, each inside the matrix."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    if rows.shape != cols.shape or rows.ndim != 1:
        raise ValueError("gold rows and columns must be two 1-D arrays of one length")
    n_docs, n_labels = shape
    if len(rows) and (rows.min() < 0 or rows.max() >= n_docs or cols.min() < 0
                      or cols.max() >= n_labels):  # fmt: skip
        raise ValueError("a gold pair lies outside the matrix")
    key = np.unique(rows * n_labels + cols)
    return key // n_labels, key % n_labels


def _sorted_counts(
    ordered: np.ndarray, lines: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each (line, value): how many cells of that line of ``ordered`` (each line sorted
    ascending) lie below the value and how many at or below it, by a binary search vectorised
    over the pairs (no Python loop over lines)."""
    width = ordered.shape[1]

    def search(strict: bool) -> np.ndarray:
        low = np.zeros(len(values), dtype=np.int64)
        high = np.full(len(values), width, dtype=np.int64)
        while True:
            open_ = low < high
            if not open_.any():
                return low
            mid = (low + high) // 2
            probe = ordered[lines, np.minimum(mid, width - 1)]
            below = (probe < values) if strict else (probe <= values)
            low = np.where(open_ & below, mid + 1, low)
            high = np.where(open_ & ~below, mid, high)

    return search(strict=True), search(strict=False)


def _column_counts(
    block: np.ndarray, cols: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each (column, value): the block's cells of that column below / at or below it."""
    return _sorted_counts(np.sort(block, axis=0).T, cols, values)


class Pooling:
    """Max-pooling of a block's columns to the nodes of one level: ``node_of[column]`` is the
    column's node (0 .. n_nodes - 1, every node with at least one column) or -1 where the
    column has no node at that level (left out there, as :func:`hieval.metrics.ranking.pool`
    leaves it out). A node's score is its columns' maximum, its gold "any gold column"."""

    def __init__(self, node_of: np.ndarray) -> None:
        node_of = np.asarray(node_of, dtype=np.int64)
        kept = np.flatnonzero(node_of >= 0)
        self.order = kept[np.argsort(node_of[kept], kind="stable")]
        nodes = node_of[self.order]
        self.starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]]) if len(nodes) else nodes
        self.n_nodes = int(nodes[-1]) + 1 if len(nodes) else 0
        if len(self.starts) != self.n_nodes:
            raise ValueError("every node of the level needs at least one column")
        self.node_of = node_of

    def block(self, block: np.ndarray) -> np.ndarray:
        """The block at the level: documents x nodes."""
        if not self.n_nodes:
            return np.empty((block.shape[0], 0), dtype=block.dtype)
        return np.maximum.reduceat(block[:, self.order], self.starts, axis=1)

    def gold(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        node = self.node_of[cols]
        kept = node >= 0
        return rows[kept], node[kept]


def blocked_aucs(
    matrix: np.ndarray,
    gold_rows: np.ndarray,
    gold_cols: np.ndarray,
    *,
    block_docs: int = DEFAULT_BLOCK_DOCS,
    pooling: Pooling | None = None,
) -> BlockedAucs:
    """Micro and per-column ROC-AUC of ``matrix`` (documents x codes; a ``np.memmap`` from
    ``np.load(path, mmap_mode="r")`` is read one block of ``block_docs`` rows at a time) with
    the gold pairs ``(gold_rows[i], gold_cols[i])`` positive and every other cell negative;
    with ``pooling``, the same at that level of the hierarchy (each block max-pooled as it is
    read; ``per_label`` is then per node).

    Ties count half, as scikit-learn's trapezoids and :mod:`hieval.metrics.ranking` do.
    """
    if matrix.ndim != 2:
        raise ValueError("the score matrix must be 2-D (documents x codes)")
    if block_docs < 1:
        raise ValueError("block_docs must be at least 1")
    n_docs = matrix.shape[0]
    rows, cols = _checked_gold(matrix.shape, gold_rows, gold_cols)
    if pooling is not None:
        if len(pooling.node_of) != matrix.shape[1]:
            raise ValueError("the pooling needs a node (or -1) for every column")
        rows, cols = _checked_gold((n_docs, pooling.n_nodes), *pooling.gold(rows, cols))
    n_labels = pooling.n_nodes if pooling is not None else matrix.shape[1]
    block_starts = range(0, n_docs, block_docs)

    def read(start: int) -> np.ndarray:
        block = np.asarray(matrix[start : start + block_docs])
        if not np.all(np.isfinite(block)):
            raise ValueError("scores must be finite")
        return pooling.block(block) if pooling is not None else block

    # Each positive's score, read block by block (a memmap's slice reads only its rows).
    values = np.empty(len(rows), dtype=matrix.dtype)
    bounds = np.searchsorted(rows, [*block_starts, n_docs])
    for number, start in enumerate(block_starts):
        a, b = bounds[number], bounds[number + 1]
        if b > a:
            values[a:b] = read(start)[rows[a:b] - start, cols[a:b]]
    micro_sorted = np.sort(values)
    micro_below = np.zeros(len(values), dtype=np.int64)
    micro_at_or_below = np.zeros(len(values), dtype=np.int64)
    col_below = np.zeros(len(values), dtype=np.int64)
    col_at_or_below = np.zeros(len(values), dtype=np.int64)
    for start in block_starts:
        block = read(start)
        flat = np.sort(block, axis=None)
        micro_below += np.searchsorted(flat, micro_sorted, side="left")
        micro_at_or_below += np.searchsorted(flat, micro_sorted, side="right")
        below, at_or_below = _column_counts(block, cols, values)
        col_below += below
        col_at_or_below += at_or_below
    return BlockedAucs(
        micro=_micro(micro_below, micro_at_or_below, n_docs * n_labels),
        per_label=_per_label(cols, col_below, col_at_or_below, n_docs, n_labels),
    )


def _micro(below: np.ndarray, at_or_below: np.ndarray, cells: int) -> float | None:
    """Twice the positives' rank sum is Σ (below + at or below) + P (1-based average ranks)."""
    positives = len(below)
    negatives = cells - positives
    if positives == 0 or negatives == 0:
        return None
    doubled = int(below.sum(dtype=np.int64) + at_or_below.sum(dtype=np.int64)) + positives
    return _auc(doubled, positives, negatives)


def _per_label(
    cols: np.ndarray, below: np.ndarray, at_or_below: np.ndarray, n_docs: int, n_labels: int
) -> np.ndarray:
    support = np.bincount(cols, minlength=n_labels)
    doubled = _integer_sums(cols, below + at_or_below, n_labels) + support
    auc = np.full(n_labels, np.nan)
    for c in np.flatnonzero((support > 0) & (support < n_docs)):
        auc[c] = _auc(int(doubled[c]), int(support[c]), n_docs - int(support[c]))
    return auc


def _integer_sums(groups: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per-group sums of int64 ``values`` in int64 (``np.bincount`` with weights is float64,
    exact only below 2**53; an unbuffered add stays integer)."""
    sums = np.zeros(n, dtype=np.int64)
    np.add.at(sums, groups, values)
    return sums


def blocked_document_ranks(
    matrix: np.ndarray,
    gold_rows: np.ndarray,
    gold_cols: np.ndarray,
    *,
    block_docs: int = DEFAULT_BLOCK_DOCS,
    pooling: Pooling | None = None,
    code_order: np.ndarray | None = None,
) -> DocumentRanks:
    """Every gold pair's place in its document's ranking, as
    :func:`hieval.metrics.ranking.document_ranks` gives it (so P@K, R@K, R-precision, MAP and
    nDCG@K follow unchanged), one block of documents at a time: each row is sorted once and
    the document's gold codes are located in it by binary search.

    Rows are the documents in the gold's order (the document index); ``code_order[column]``
    is each column's rank in code order (ties are ordered by code, and the pairs come out in
    code order within a document, as today's sorted keys have them); identity when None. At
    a pooled level the nodes are already in name order.
    """
    if block_docs < 1:
        raise ValueError("block_docs must be at least 1")
    n_docs = matrix.shape[0]
    rows, cols = _checked_gold(matrix.shape, gold_rows, gold_cols)
    if pooling is not None:
        rows, cols = _checked_gold((n_docs, pooling.n_nodes), *pooling.gold(rows, cols))
    width = pooling.n_nodes if pooling is not None else matrix.shape[1]
    order_of = np.arange(width) if code_order is None else np.asarray(code_order, np.int64)
    by_code = np.lexsort((order_of[cols], rows))
    rows, cols = rows[by_code], cols[by_code]
    position = np.empty(len(rows), dtype=np.int64)
    values = np.empty(len(rows), dtype=matrix.dtype)
    at_least = np.empty(len(rows), dtype=np.int64)
    bounds = np.searchsorted(rows, [*range(0, n_docs, block_docs), n_docs])
    for number, start in enumerate(range(0, n_docs, block_docs)):
        a, b = bounds[number], bounds[number + 1]
        if a == b:
            continue
        block = np.asarray(matrix[start : start + block_docs])
        if not np.all(np.isfinite(block)):
            raise ValueError("scores must be finite")
        block = pooling.block(block) if pooling is not None else block
        local, own = rows[a:b] - start, cols[a:b]
        values[a:b] = v = block[local, own]
        below, at_or_below = _sorted_counts(np.sort(block, axis=1), local, v)
        above = width - at_or_below
        for i in np.flatnonzero(at_or_below - below > 1):  # ties are ordered by code
            tied = block[local[i]] == v[i]
            above[i] += np.count_nonzero(tied & (order_of < order_of[own[i]]))
        position[a:b] = above
        at_least[a:b] = width - below
    return DocumentRanks(rows, position, _gold_at_least(rows, values) / at_least)


def _gold_at_least(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each gold pair: its document's gold pairs scoring at least as high (itself too)."""
    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((values, rows))
    r, v = rows[order], values[order]
    starts = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (v[1:] != v[:-1])])
    tie_start = starts[np.searchsorted(starts, np.arange(len(r)), side="right") - 1]
    doc_end = np.searchsorted(r, r, side="right")
    counts = np.empty(len(r), dtype=np.int64)
    counts[order] = doc_end - tie_start
    return counts


def document_values(ranks: DocumentRanks, n_docs: int, ks: Sequence[int]) -> dict:
    """The ranking ``mean`` rows from document ranks, as
    :func:`hieval.metrics.ranking.point_values` computes them (exact means over the counted
    documents)."""
    values: dict[tuple[str, str], float] = {}
    docs = RankedDocuments(ranks, n_docs)
    for metric in DOCUMENT_MEANS:
        counted = docs.counted(metric.per_document.over)
        if not counted.any():
            continue
        for name, k in at_ks(metric.metric, ks):
            per_doc = metric.per_document.statistic(docs, k)
            values[metric.average, name] = exact_mean(per_doc[counted].tolist())
    return values


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
    block_docs: int = DEFAULT_BLOCK_DOCS,
) -> Decided:
    """What normalisation's selection keeps of a dense matrix (``_select_by_score`` in
    :mod:`hieval.inputs.normalize`), a block of documents at a time: cells scoring at least
    their column's threshold (``code_thresholds[column]``, NaN for "the global one") or
    ``threshold``, and of those each row's ``top_k`` highest, ties by code
    (``code_order[column]``: the column's rank in code order; identity when None).

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
        if not np.all(np.isfinite(block)):
            raise ValueError("scores must be finite")
        kept = np.ones(block.shape, dtype=bool) if limit is None else block >= limit
        below += int(kept.size - np.count_nonzero(kept))
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
