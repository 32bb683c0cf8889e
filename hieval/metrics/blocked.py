"""A dense documents x codes score matrix read in blocks of documents (a memory-mapped
``.npy`` is never copied whole): its decisions (threshold, per-code thresholds, top-k) as the
pairs the count engine takes, its ranking metrics — exact micro and macro ROC-AUC and
every gold pair's place in its document's ranking (P@K, R@K, R-precision, MAP, nDCG@K) — at
the leaves and at max-pooled levels of the hierarchy, and a dev matrix's tuned threshold.

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

Used by :mod:`hieval.metrics.blocked_rows` for a dense model's rows (and the conventions'
AUCs): the matrix's rows are documents (any order: the means over documents are exact sums),
its columns labels of the label space, every cell finite (normalisation refused the others)
or :data:`~hieval.inputs.dense_decisions.UNSCORED` (``-inf``: a long file's pair it does not
score, which :func:`blocked_levels` ranks as the long path ranks an unscored pair: tied with
the other unscored pairs below every scored one, after the scored codes in code order);
:func:`blocked_levels` also takes the gold's other codes and documents as unscored pairs, the
one-level functions only pairs inside the matrix. The levels are pooled by
:mod:`hieval.metrics.max_pool` and the macro counts merged by
:mod:`hieval.metrics.column_counts` (compiled loops); :class:`SharedPooling` and
:func:`blocked_calibration` are the earlier numpy versions, kept for their tests and the
benchmark's prototype side.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from hieval.engine.groups import default_threads
from hieval.inputs.dense_decisions import BLOCK_DOCS, UNSCORED, Decided, decided_pairs
from hieval.metrics.arithmetic import exact_mean
from hieval.metrics.column_counts import ColumnCounts
from hieval.metrics.count_measures import F1
from hieval.metrics.document_measures import DocumentRanks, RankedDocuments
from hieval.metrics.max_pool import CompiledPooling
from hieval.metrics.ranking import document_means

#: Documents per block: 1,024 x 7,900 float32 is 32 MB, sorted twice.
DEFAULT_BLOCK_DOCS = BLOCK_DOCS

__all__ = ["Decided", "decided_pairs"]  # the decisions live with the inputs, which make them


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
        return exact_mean(defined) if len(defined) else None


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
    """The ranking ``mean`` rows from document ranks, by today's one function
    (:func:`hieval.metrics.ranking.document_mean`: exact means over the counted documents);
    without gains, so the propensity-scored rows are left out (None)."""
    return document_means(RankedDocuments(ranks, n_docs), ks)


class SharedPooling:
    """Max-pooling of a block to several levels with one column permutation per block.

    Why: pooling each level from the leaves permutes the whole block once per level (six
    times for ICD-10's default levels). With the columns ordered by their path from the
    coarsest level down (fewer nodes = coarser), every node of a tree's level is one
    contiguous run of columns, so each level is a single ``np.maximum.reduceat`` over the
    same permuted block. A level whose nodes are not contiguous (not a tree) keeps its own
    :class:`Pooling`.
    """

    def __init__(self, node_of: dict[str, np.ndarray]) -> None:
        keys = {level: np.asarray(nodes, dtype=np.int64) for level, nodes in node_of.items()}
        self.levels: dict[str, Pooling] = {level: Pooling(keys[level]) for level in keys}
        width = len(next(iter(keys.values()))) if keys else 0
        self.order = np.arange(width)
        self.runs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        # Coarse to fine; a level joins the path only if every level on it stays contiguous.
        for level in sorted(keys, key=lambda level: (self.levels[level].n_nodes, level)):
            path = [*self.runs, level]
            order = np.lexsort([keys[name] for name in reversed(path)])
            runs = {
                name: _contiguous_runs(keys[name][order], self.levels[name].n_nodes)
                for name in path
            }
            if all(found is not None for found in runs.values()):
                self.order, self.runs = order, runs

    def permute(self, block: np.ndarray) -> np.ndarray:
        return block[:, self.order]

    def block(self, level: str, block: np.ndarray, permuted: np.ndarray) -> np.ndarray:
        """``block`` at ``level`` (documents x nodes, node order), from the permuted block."""
        if level not in self.runs:
            return self.levels[level].block(block)
        indices, node = self.runs[level]
        pooled = np.empty((block.shape[0], len(node)), dtype=block.dtype)
        if len(node):
            pooled[:, node] = np.maximum.reduceat(permuted, indices, axis=1)[:, ::2]
        return pooled


def _contiguous_runs(nodes: np.ndarray, n_nodes: int) -> tuple[np.ndarray, np.ndarray] | None:
    """For nodes along the permuted columns: ``reduceat`` indices (each run's start and end,
    the last end left out at the edge) and each run's node, or None if a node has two runs."""
    if not len(nodes):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]])
    ends = np.r_[starts[1:], len(nodes)]
    own = nodes[starts] >= 0
    starts, ends, node = starts[own], ends[own], nodes[starts][own]
    if len(node) != n_nodes or len(np.unique(node)) != len(node):
        return None
    if not len(node):
        return np.zeros(0, dtype=np.int64), node
    indices = np.column_stack([starts, ends]).ravel()
    if indices[-1] == len(nodes):
        indices = indices[:-1]  # reduceat runs the last index to the end
    return indices, node


@dataclass
class _Level:
    """One level's label space and gold pairs, and the running counts of its scored ones.

    Labels have two numberings: ``full`` ids over the level's whole label space, in code
    order (the leaves: the matrix's columns then the gold's codes outside it, ranked by
    ``order_of``; a level: its nodes in name order) and ``compact`` columns of the block at
    the level (the scored labels only, ``full_of[compact]``). A gold pair is scored when its
    document has a row and its label a column; the others rank below every scored pair."""

    rows: np.ndarray  # every gold pair, sorted by document, then code order
    full: np.ndarray
    compact: np.ndarray  # -1 for an unscored pair
    total: int  # labels of the level's label space
    full_of: np.ndarray  # the full id of each compact column
    order_of: np.ndarray  # each full id's rank in code order
    scored_rows: int  # documents with a row in the matrix
    bounds: np.ndarray | None = None  # per block, its scored pairs' range in ``scored``
    values: np.ndarray | None = None  # the scored pairs' scores
    micro_sorted: np.ndarray | None = None
    counts: list[np.ndarray] | None = None  # micro below, at or below; column the same
    position: np.ndarray | None = None
    at_least: np.ndarray | None = None
    columns: ColumnCounts | None = None  # macro: each scored pair's column counts
    unscored: np.ndarray | None = None  # per compact column, its UNSCORED cells (second read)
    outside: np.ndarray | None = None  # the gold pairs with a row but no column
    outside_bounds: np.ndarray | None = None  # per block, their range in ``outside``

    @property
    def scored(self) -> np.ndarray:
        return np.flatnonzero(self.compact >= 0)

    @property
    def width(self) -> int:
        return len(self.full_of)


def blocked_levels(  # noqa: PLR0913 (the matrix, its gold, its label space, the blocks and the bootstrap's read)
    matrix: np.ndarray,
    gold_rows: np.ndarray,
    gold_cols: np.ndarray,
    *,
    node_of: dict[str, np.ndarray] | None = None,
    code_order: np.ndarray | None = None,
    n_docs: int | None = None,
    extra_labels: int = 0,
    block_docs: int = DEFAULT_BLOCK_DOCS,
    second_read: Callable[[dict[str, _Level]], Callable[..., None]] | None = None,
    aucs: bool = True,
    threads: int | None = None,
) -> dict[str, tuple[BlockedAucs, DocumentRanks]]:
    """:func:`blocked_aucs` and :func:`blocked_document_ranks` at the leaves (``leaf``) and
    at every level of ``node_of`` (level -> each label's node, numbered in name order, or
    -1), in two reads of the matrix instead of three per level: the first locates each gold
    pair in its document (and keeps its score), the second counts the scores below it.

    The label space and the documents may be larger than the matrix, as hieval's are (the
    gold's codes and documents count too): ``extra_labels`` gold codes outside the matrix's
    columns are labels ``n_labels ..`` (gold columns may name them; ``code_order`` and
    ``node_of`` then cover them), and gold documents ``matrix rows .. n_docs - 1`` have no
    row. Their pairs are unscored: tied below every scored pair for AUC, after the scored
    codes in code order in a document's ranking, as :mod:`hieval.metrics.ranking` has it.

    ``second_read``, when given, is called with every level's state after the first read
    (its gold pairs' scores known) and returns a function the second read calls with each
    level's name, block number, first document and block: the bootstrap's AUC replicates
    (:mod:`hieval.metrics.uncertainty.auc_blocks`) ride on the same read. ``aucs=False``
    leaves the point estimates' AUC counts out (every ``BlockedAucs`` is then empty: micro
    None, per label NaN), and with no ``second_read`` the second read too: the bootstrap's
    units need the document ranks alone (the rows were computed by the score stage). A
    block's levels are read side by side on ``threads`` threads (None: the cores this
    process may use; two at most: :class:`_EachLevel`), so ``second_read``'s function may be
    called for two levels at once, from two threads: each level's calls come in block order,
    and every block's before the next block's.
    """
    if block_docs < 1:
        raise ValueError("block_docs must be at least 1")
    rows_scored, n_labels = matrix.shape
    n_docs = rows_scored if n_docs is None else n_docs
    total = n_labels + extra_labels
    if n_docs < rows_scored or extra_labels < 0:
        raise ValueError("n_docs must cover the matrix's rows, extra_labels be at least 0")
    rows, cols = _checked_gold((n_docs, total), gold_rows, gold_cols)
    order_of = np.arange(total) if code_order is None else np.asarray(code_order, np.int64)
    levels = {"leaf": _level(rows, cols, np.arange(n_labels), order_of, total, rows_scored)}
    compact_nodes = {}
    for name, nodes in (node_of or {}).items():
        nodes = np.asarray(nodes, dtype=np.int64)
        if len(nodes) != total:
            raise ValueError("node_of needs a node (or -1) for every label")
        level_total = int(nodes.max(initial=-1)) + 1
        full_of = np.unique(nodes[:n_labels][nodes[:n_labels] >= 0])
        compact = np.full(level_total + 1, -1, dtype=np.int64)  # the last slot: no node
        compact[full_of] = np.arange(len(full_of))
        compact_nodes[name] = compact[nodes]  # -1 stays -1 (the last slot)
        kept = nodes[cols] >= 0
        levels[name] = _level(
            rows[kept], nodes[cols[kept]], full_of, np.arange(level_total), level_total,
            rows_scored,
        )  # fmt: skip
    by_column = {name: nodes[:n_labels] for name, nodes in compact_nodes.items()}
    pooling = CompiledPooling(by_column) if by_column else None
    starts = range(0, rows_scored, block_docs)
    for state in levels.values():
        scored = state.scored
        state.bounds = np.searchsorted(state.rows[scored], [*starts, rows_scored])
        state.outside = np.flatnonzero((state.compact < 0) & (state.rows < rows_scored))
        state.outside_bounds = np.searchsorted(state.rows[state.outside], [*starts, rows_scored])
        state.values = np.empty(len(scored), dtype=matrix.dtype)
        state.position = np.empty(len(state.rows), dtype=np.int64)
        state.at_least = np.empty(len(scored), dtype=np.int64)
    with _EachLevel(levels, threads) as each:
        for number, start, by_level in _level_blocks(matrix, starts, block_docs, pooling):
            each.run(lambda name, state: _locate(state, by_level[name], number, start))  # noqa: B023 (waited for)
        for state in levels.values() if aucs else ():
            state.micro_sorted = np.sort(state.values)
            state.counts = [np.zeros(len(state.values), dtype=np.int64) for _ in range(4)]
            state.columns = ColumnCounts(state.compact[state.scored], state.values, state.width)
            state.unscored = np.zeros(state.width, dtype=np.int64)
        visit = second_read(levels) if second_read is not None else None
        second = aucs or visit is not None
        blocks = _level_blocks(matrix, starts if second else (), block_docs, pooling)
        for number, start, by_level in blocks:
            read = functools.partial(_second, by_level, number, start, aucs=aucs, visit=visit)
            each.run(read)
    return {name: _results(state, n_docs) for name, state in levels.items()}


def _second(by_level: dict[str, np.ndarray], number: int, start: int, name: str,
            state: _Level, *, aucs: bool, visit: Callable[..., None] | None) -> None:  # fmt: skip
    """The second read of one level's block: its AUC counts, then the bootstrap's visit (each
    writes only its own accumulators)."""
    if aucs:
        _count(state, by_level[name])
    if visit is not None:
        visit(name, number, start, by_level[name])


#: Levels a block is read at side by side, at most (see :class:`_EachLevel`).
LEVELS_AT_ONCE = 2


class _EachLevel:
    """Runs a step of one block at every level, the levels side by side on the run's threads
    (``threads``; None: the cores this process may use), and returns once all are done.

    Why: a block's levels are independent (each step reads the block and writes only its own
    level's state: its AUC counts and its bootstrap replicates' accumulator), and their sorts
    and compiled loops release the GIL. Done one after another, a dense model's reads ran on
    one core (15 s of one MIMIC-IV-sized model's 22), and with the bootstrap every level's
    replicates on one helper thread beside the counts (most of five models' five minutes).
    Each level still takes the blocks one at a time in order, so every sum is added in the
    same order as before: the same bits."""

    def __init__(self, levels: dict[str, _Level], threads: int | None) -> None:
        self.levels = levels
        # Two at most: a level's step holds its own copies of the block (its sorts, the
        # replicates' bins), and the blocked memory plan (hieval.resources'
        # BYTES_PER_BLOCK_CELL) was measured with two at once.
        workers = min(threads or default_threads(), len(levels), LEVELS_AT_ONCE)
        self.pool = ThreadPoolExecutor(workers, "levels") if workers > 1 else None

    def run(self, step: Callable[[str, _Level], None]) -> None:
        if self.pool is None:
            for name, state in self.levels.items():
                step(name, state)
            return
        for done in [self.pool.submit(step, name, state) for name, state in self.levels.items()]:
            done.result()

    def __enter__(self) -> _EachLevel:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def _level(rows, full, full_of, order_of, total: int, scored_rows: int) -> _Level:
    """A level's state with its gold pairs unique and in today's order."""
    key = np.unique(rows * total + full)
    rows, full = key // total, key % total
    by_code = np.lexsort((order_of[full], rows))
    rows, full = rows[by_code], full[by_code]
    compact_of = np.full(total, -1, dtype=np.int64)
    compact_of[full_of] = np.arange(len(full_of))
    compact = np.where(rows < scored_rows, compact_of[full], -1)
    return _Level(rows, full, compact, total, np.asarray(full_of), order_of, scored_rows)


def _level_blocks(matrix, starts, block_docs: int, pooling: CompiledPooling | None):
    """Each block of documents, with its pooled block at every level."""
    for number, start in enumerate(starts):
        block = np.asarray(matrix[start : start + block_docs])
        if not np.all(block < np.inf):  # NaN or +inf; an UNSCORED cell (-inf) is taken
            raise ValueError("scores must be finite")
        by_level = {"leaf": block}
        if pooling is not None:
            pooled = pooling.pool(block)
            for name in pooling.levels:
                by_level[name] = pooling.block(name, pooled)
        yield number, start, by_level


def _locate(state: _Level, block: np.ndarray, number: int, start: int) -> None:
    """First read: the block's scored gold pairs' scores and places in their documents (the
    scored codes before them; tied ones count when they come first in code order). A gold
    cell the model left :data:`UNSCORED` follows its document's scored codes, then the
    unscored codes before it in code order (those outside the matrix too), as
    :func:`hieval.metrics.ranking.document_ranks` places an unscored gold pair."""
    rank = state.order_of[state.full_of]  # each column's rank in code order
    _locate_outside(state, block, number, start, rank)
    a, b = state.bounds[number], state.bounds[number + 1]
    if a == b:
        return
    which = state.scored[a:b]
    local, own = state.rows[which] - start, state.compact[which]
    state.values[a:b] = v = block[local, own]
    below, at_or_below = _sorted_counts(np.sort(block, axis=1), local, v)
    above = state.width - at_or_below
    for i in np.flatnonzero((at_or_below - below > 1) & (v != UNSCORED)):  # ties by code
        tied = block[local[i]] == v[i]
        above[i] += np.count_nonzero(tied & (rank < rank[own[i]]))
    missing = np.flatnonzero(v == UNSCORED)
    if len(missing):  # after the scored codes: the unscored codes before it in code order
        before = _scored_before(block, local[missing], rank[own[missing]], rank)
        above[missing] += rank[own[missing]] - before
    state.position[which] = above
    state.at_least[a:b] = state.width - below


def _locate_outside(
    state: _Level, block: np.ndarray, number: int, start: int, rank: np.ndarray
) -> None:
    """The places of the block's gold pairs whose code has no column: after their document's
    scored codes, then its unscored codes before them in code order (a row's UNSCORED cells
    among those)."""
    a, b = state.outside_bounds[number], state.outside_bounds[number + 1]
    if a == b:
        return
    which = state.outside[a:b]
    local, own_rank = state.rows[which] - start, state.order_of[state.full[which]]
    scored = np.count_nonzero(block[local] != UNSCORED, axis=1)
    state.position[which] = scored + own_rank - _scored_before(block, local, own_rank, rank)


def _scored_before(
    block: np.ndarray, rows: np.ndarray, ranks: np.ndarray, rank: np.ndarray
) -> np.ndarray:
    """For each ``(rows[i], ranks[i])``: the row's scored (not :data:`UNSCORED`) cells of
    ``block`` in columns before rank ``ranks[i]`` in code order (``rank``: each column's
    rank), from one running count per row involved."""
    by_rank = np.argsort(rank, kind="stable")  # the columns in code order
    needed, row_of = np.unique(rows, return_inverse=True)
    scored = (block[needed] != UNSCORED)[:, by_rank]
    running = np.cumsum(scored, axis=1, dtype=np.int32)  # scored cells up to each place
    at = np.searchsorted(rank[by_rank], ranks, side="left")  # the columns before it
    return np.where(at > 0, running[row_of, np.maximum(at - 1, 0)], 0)


def _count(state: _Level, block: np.ndarray) -> None:
    """Second read: the block's scores below / at or below every scored gold pair (micro:
    all of the block's cells; macro: the cells of the pair's own column)."""
    flat = np.sort(block, axis=None)
    micro_below, micro_at = state.counts[:2]
    micro_below += np.searchsorted(flat, state.micro_sorted, side="left")
    micro_at += np.searchsorted(flat, state.micro_sorted, side="right")
    state.columns.add(block)
    if flat.size and flat[0] == UNSCORED:
        state.unscored += np.count_nonzero(block == UNSCORED, axis=0)


def _results(state: _Level, n_docs: int) -> tuple[BlockedAucs, DocumentRanks]:
    """Mann-Whitney with the unscored pairs tied below every scored one, and the unscored
    gold pairs' places (after the document's scored codes, in code order)."""
    scored = state.scored
    unscored = np.flatnonzero(state.compact < 0)
    aucs = _aucs(state, n_docs) if state.counts is not None else None
    precision = np.empty(len(state.rows), dtype=np.float64)
    precision[scored] = _gold_at_least(state.rows[scored], state.values) / state.at_least
    inside = scored[state.values == UNSCORED]  # gold cells the model left unscored
    if len(inside):  # the last threshold: the whole label space
        precision[inside] = np.bincount(state.rows, minlength=n_docs)[state.rows[inside]]
        precision[inside] /= state.total
    if len(unscored):
        rows = state.rows[unscored]
        no_row = unscored[rows >= state.scored_rows]  # the others placed by the first read
        state.position[no_row] = state.order_of[state.full[no_row]]  # after no scored code
        size = np.bincount(state.rows, minlength=n_docs)[rows]
        precision[unscored] = size / state.total  # the last threshold: the whole label space
    empty = BlockedAucs(None, np.full(state.total, np.nan))
    return aucs if aucs is not None else empty, DocumentRanks(state.rows, state.position, precision)


def _aucs(state: _Level, n_docs: int) -> BlockedAucs:
    """Micro and per-label AUC from the second read's counts."""
    micro_below, micro_at, col_below, col_at = state.counts
    col_below[:], col_at[:] = state.columns.counts()
    scored = state.scored
    unscored = np.flatnonzero(state.compact < 0)
    cells = n_docs * state.total
    bottom = cells - state.scored_rows * state.width  # unscored cells outside the matrix
    # The matrix's UNSCORED cells are in its blocks' counts already (tied at the bottom); a
    # gold cell among them ties with the cells outside, which the others lie above.
    inside = state.values == UNSCORED
    inside_total = int(state.unscored.sum())
    positives = len(state.rows)
    micro = None
    if 0 < positives < cells:
        doubled = int(micro_below.sum(dtype=np.int64) + micro_at.sum(dtype=np.int64))
        doubled += len(scored) * (2 * bottom + 1) - int(inside.sum()) * bottom
        doubled += len(unscored) * (bottom + inside_total + 1)
        micro = _auc(doubled, positives, cells - positives)
    support = np.bincount(state.full, minlength=state.total)
    column_rows = np.zeros(state.total, dtype=np.int64)
    column_rows[state.full_of] = state.scored_rows
    per_bottom = n_docs - column_rows  # each label's documents outside the matrix
    per_inside = np.zeros(state.total, dtype=np.int64)
    per_inside[state.full_of] = state.unscored  # each label's UNSCORED cells
    doubled_per = _integer_sums(state.full[scored], col_below + col_at, state.total)
    doubled_per += np.bincount(state.full[scored], minlength=state.total) * (2 * per_bottom + 1)
    doubled_per -= np.bincount(state.full[scored][inside], minlength=state.total) * per_bottom
    doubled_per += np.bincount(state.full[unscored], minlength=state.total) * (
        per_bottom + per_inside + 1
    )
    per_label = np.full(state.total, np.nan)
    for c in np.flatnonzero((support > 0) & (support < n_docs)):
        per_label[c] = _auc(int(doubled_per[c]), int(support[c]), n_docs - int(support[c]))
    return BlockedAucs(micro, per_label)


def blocked_global_threshold(
    matrix: np.ndarray,
    gold_rows: np.ndarray,
    gold_cols: np.ndarray,
    *,
    unscored_positives: int = 0,
    block_docs: int = DEFAULT_BLOCK_DOCS,
) -> tuple[float, float]:
    """The threshold maximising flat micro-F1 on a dense dev matrix and its F1, as
    :func:`hieval.metrics.tuning.global_threshold` chooses it (ties in F1 to the highest
    threshold), from one read for the gold pairs' scores and one that counts the cells at
    or above each; ``unscored_positives``: dev gold pairs outside the matrix (false
    negatives at every threshold).

    Why only the gold pairs' scores are candidates: between two consecutive distinct gold
    scores TP is constant and FP falls as the threshold rises, so F1 is highest at the upper
    one; any other score ties the best F1 only where a gold score above it does too, and the
    highest threshold wins. Above the highest gold score F1 is 0. (The report's dev curve,
    which samples every distinct score, is the one thing this does not give.)
    """
    n_docs = matrix.shape[0]
    rows, cols = _checked_gold(matrix.shape, gold_rows, gold_cols)
    positives = len(rows) + unscored_positives
    values = np.empty(len(rows), dtype=matrix.dtype)
    starts = range(0, n_docs, block_docs)
    bounds = np.searchsorted(rows, [*starts, n_docs])
    highest = -np.inf
    for number, start in enumerate(starts):
        block = np.asarray(matrix[start : start + block_docs])
        if not np.all(np.isfinite(block)):
            raise ValueError("scores must be finite")
        if block.size:
            highest = max(highest, float(block.max()))
        a, b = bounds[number], bounds[number + 1]
        values[a:b] = block[rows[a:b] - start, cols[a:b]]
    if highest == -np.inf:
        raise ValueError("the dev predictions hold no scores to tune a threshold on")
    candidates = np.unique(values)  # ascending
    if not len(candidates):
        return highest, 0.0  # no gold pair is scored: F1 is 0 everywhere, the highest wins
    below = np.zeros(len(candidates), dtype=np.int64)
    for start in starts:
        flat = np.sort(np.asarray(matrix[start : start + block_docs]), axis=None)
        below += np.searchsorted(flat, candidates, side="left")
    at_least = matrix.size - below
    tp = len(values) - np.searchsorted(np.sort(values), candidates, side="left")
    f1 = F1(tp, at_least - tp, positives - tp)
    best = len(f1) - 1 - int(np.argmax(f1[::-1]))
    return float(candidates[best]), float(f1[best])


def blocked_calibration(
    matrix: np.ndarray,
    gold_rows: np.ndarray,
    gold_cols: np.ndarray,
    *,
    n_docs: int | None = None,
    extra_labels: int = 0,
    bins: int = 15,
    block_docs: int = DEFAULT_BLOCK_DOCS,
) -> dict[str, float] | None:
    """Brier score and ECE as :func:`hieval.metrics.ranking.calibration_values` defines them
    (unscored pairs score 0; None when a score lies outside [0, 1]), a block at a time.

    Each block's float sums (squared errors; each bin's scores) are combined with
    ``math.fsum``. With one block the result is today's to the last bit; with several it can
    differ from today's one pairwise sum over every cell in the last bits (a few ulps): the
    one documented change the wiring brings (benchmarks/DENSE_PLAN.md, §3)."""
    import math

    rows_scored, n_labels = matrix.shape
    n_docs = rows_scored if n_docs is None else n_docs
    rows, cols = _checked_gold((n_docs, n_labels + extra_labels), gold_rows, gold_cols)
    inside = (rows < rows_scored) & (cols < n_labels)
    missed = int((~inside).sum())  # gold pairs without a score: score 0, truth 1
    rows, cols = rows[inside], cols[inside]
    pairs = n_docs * (n_labels + extra_labels)
    squared, score_sums = [], []
    true_sum = np.zeros(bins, dtype=np.int64)
    bounds = np.searchsorted(rows, [*range(0, rows_scored, block_docs), rows_scored])
    for number, start in enumerate(range(0, rows_scored, block_docs)):
        score = np.asarray(matrix[start : start + block_docs], dtype=np.float64)
        if not np.all(np.isfinite(score)):
            raise ValueError("scores must be finite")
        if score.size and (score.min() < 0 or score.max() > 1):
            return None
        truth = np.zeros(score.shape, dtype=bool)
        a, b = bounds[number], bounds[number + 1]
        truth[rows[a:b] - start, cols[a:b]] = True
        score, truth = score.ravel(), truth.ravel()
        error = score - truth
        squared.append(float(np.sum(error * error)))
        bin_of = np.minimum((score * bins).astype(np.int64), bins - 1)
        score_sums.append(np.bincount(bin_of, weights=score, minlength=bins))
        true_sum += np.bincount(bin_of[truth], minlength=bins)
    if pairs == 0:
        return None
    score_sum = np.array([math.fsum(column) for column in zip(*score_sums, strict=True)])
    true = true_sum.astype(np.float64)
    true[0] += missed
    gaps = np.abs(true - (score_sum if len(score_sums) else np.zeros(bins)))
    return {"brier": (math.fsum(squared) + missed) / pairs, "ece": math.fsum(gaps) / pairs}
