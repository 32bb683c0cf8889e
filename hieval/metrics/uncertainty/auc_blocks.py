"""Bootstrap replicates of ROC-AUC (micro and macro) for inputs of any size: scored cells are
fed in chunks (a dense matrix's blocks, or a long table's pairs) and never sorted whole.

Why: :mod:`hieval.metrics.uncertainty.auc` sorts every scored pair of a level once and keeps
sparse per-interval counts, about 0.3 KB a pair: a dense MIMIC-IV matrix (157M scored pairs at
the leaves alone) would take tens of GB. Above :data:`~hieval.metrics.uncertainty.auc.
AUC_MAX_SCORED_PAIRS` scored pairs a level's bootstrap replicates come from here instead
(issue 36); below it, that module's exact plan stays, to the last bit.

Macro (exact): per label, its scored positives' distinct scores v_1 < … < v_K cut the scores
into intervals (= v_k, and between v_k and v_{k+1}). A negative below v_1 counts 2 under every
positive of its label (doubled Mann-Whitney units), whatever its score, so those negatives
enter through their total weight alone (the label's scored documents' weight minus the others);
each *active* negative (at or above v_1) adds its document's weights (one per replicate, the
replicates the inner contiguous dimension) to its interval, and each chunk's intervals are
folded into the label's doubled statistic at once: Σ_k P_k (2 · below v_k + tied with v_k),
with P_k the weight of the positives scoring v_k. Every sum is an integer held exactly by
float64 (weights are bootstrap counts), so the values equal the exact plan's bit for bit.

Micro (binned, bounded): the scores are cut into at most :data:`MICRO_BINS` bins (placed at
quantiles of the positive scores and of the first chunk's scores, on a 20-bit prefix of the
float32 bit pattern, which orders the scores); per document its negatives per bin, so that a
replicate's weighted negatives and positives per bin are one matrix product. A positive and a
negative in the same bin count as a tie (½), so each replicate's AUC is off by at most

    bound = Σ_b P_b N_b / (2 · W_pos · W_neg)

(P_b, N_b the bin's weighted positives and negatives): :attr:`AucReplicates.bound` holds it per
replicate, the log reports its maximum, and ``tests/test_auc_uncapped.py`` checks
|binned − exact| ≤ bound against an independent weighted Mann-Whitney.

What it does not give: the randomization test's swapped models (two models' cells pooled per
permutation: 999 × both matrices' cells at MIMIC-IV's size); above the cap a comparison's AUC
rows get the bootstrap interval of the difference and the paired bootstrap test from the same
replicates, conservative under ``bound`` (:mod:`hieval.metrics.uncertainty.bootstrap_test`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from threadpoolctl import threadpool_limits

from hieval.compiled import compiled
from hieval.metrics.ranking import macro_mean, mann_whitney

log = logging.getLogger(__name__)

#: Bins of the micro AUC's approximation (documents × bins counts, 4 bytes each): 4,096 keep a
#: MIMIC-IV-sized model's bound near 1e-5 (benchmarks/RESULTS.md).
MICRO_BINS = 4096
#: Bits of the float32 pattern the bins are placed on (a 2**20 lookup table, 4 MB).
_PREFIX_BITS = 20
_SHIFT = 32 - _PREFIX_BITS


@dataclass(frozen=True)
class AucReplicates:
    """``micro`` and ``macro`` AUC per replicate (NaN where undefined) and ``bound``: the
    largest error of each replicate's micro value (0 for macro, which is exact)."""

    micro: np.ndarray
    macro: np.ndarray
    bound: np.ndarray


def ordered_prefix(values: np.ndarray) -> np.ndarray:
    """The top :data:`_PREFIX_BITS` bits of each score's float32 pattern made monotone (the
    sign bit flipped for positives, every bit for negatives): a larger prefix never holds a
    smaller score. Scores are rounded to float32 first, which keeps their order (ties may
    merge: the bins only need to be intervals of scores)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    key = np.where(bits >= np.uint32(1 << 31), ~bits, bits | np.uint32(1 << 31))
    return (key >> np.uint32(_SHIFT)).astype(np.int64)


def _bin_counts_py(prefix, doc, table, counts) -> None:  # pragma: no cover - compiled
    for c in range(prefix.size):
        counts[doc[c], table[prefix[c]]] += 1


def _block_bins_py(bits, start, table, counts) -> None:  # pragma: no cover - compiled
    """Per document of a block (float32 bit patterns, documents × columns) its cells per bin:
    :func:`ordered_prefix` inlined, one pass, no temporaries."""
    rows, width = bits.shape
    for i in range(rows):
        own = counts[start + i]
        for j in range(width):
            u = np.int64(bits[i, j])
            key = 0xFFFFFFFF - u if u >= 0x80000000 else u + 0x80000000
            own[table[key >> _SHIFT]] += 1


def _interval_py(vals, v0, k_count, x):  # pragma: no cover - compiled
    """The interval of an active score among a label's positive scores ``vals[v0 ..]``: 2k
    where it ties the k-th, 2k + 1 between the k-th and the next."""
    lo, hi = 0, k_count
    while lo < hi:
        mid = (lo + hi) >> 1
        if vals[v0 + mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    k = lo - 1  # active cells only: x >= vals[v0]
    return 2 * k if x == vals[v0 + k] else 2 * k + 1


_interval = compiled(_interval_py)


def _fold_py(ptr, doc, score, positives, wt, state) -> None:  # pragma: no cover - compiled
    """Per column j (cells ``ptr[j] .. ptr[j + 1]``, its active negatives): each interval's
    weighted negatives, then folded into the column's doubled statistic and active weight.
    ``positives``: the labels' distinct positive scores (``val_ptr``, ``vals``) and each
    score's documents (``grp_ptr``, ``grp_doc``); ``state``: the running sums and scratch."""
    val_ptr, vals, grp_ptr, grp_doc = positives
    doubled, active, scratch, below, pw = state
    replicates = wt.shape[1]
    for j in range(ptr.size - 1):
        if ptr[j] == ptr[j + 1]:
            continue
        v0, k_count = val_ptr[j], val_ptr[j + 1] - val_ptr[j]
        scratch[: 2 * k_count] = 0.0
        for c in range(ptr[j], ptr[j + 1]):
            s, d = _interval(vals, v0, k_count, score[c]), doc[c]
            for r in range(replicates):
                scratch[s, r] += wt[d, r]
        below[:] = 0.0
        for k in range(k_count):
            pw[:] = 0.0
            for p in range(grp_ptr[v0 + k], grp_ptr[v0 + k + 1]):
                d = grp_doc[p]
                for r in range(replicates):
                    pw[r] += wt[d, r]
            for r in range(replicates):  # in float64: the products exceed 2**24
                tied = np.float64(scratch[2 * k, r])
                doubled[j, r] += np.float64(pw[r]) * (2.0 * np.float64(below[r]) + tied)
                below[r] += scratch[2 * k, r] + scratch[2 * k + 1, r]
        for r in range(replicates):
            active[j, r] += np.float64(below[r])


_bin_counts = compiled(_bin_counts_py)
_block_bins = compiled(_block_bins_py)
_fold = compiled(_fold_py)


class AucAccumulator:
    """One model's bootstrap replicates of micro and macro AUC at one level, from its scored
    negative cells fed in chunks (:meth:`add`), then :meth:`finish`.

    The level's label space has ``total`` labels (full ids) over ``n_docs`` documents, every
    document in every label's space; ``width`` of them are scored (compact columns,
    ``full_of[column]`` their full ids). ``gold_doc``/``gold_label`` are every positive pair
    (full ids), ``pos_doc``/``pos_col``/``pos_score`` the scored ones (compact columns).
    ``weights`` are the replicates' document weights (replicates × documents, integers).
    ``scored_weight`` gives, per replicate and column, the weight of the documents scored
    there (replicates × width) once every cell has been added.
    """

    def __init__(  # noqa: PLR0913 (one level's label space, its positives and the weights)
        self,
        *,
        weights: np.ndarray,
        n_docs: int,
        total: int,
        full_of: np.ndarray,
        gold_doc: np.ndarray,
        gold_label: np.ndarray,
        pos_doc: np.ndarray,
        pos_col: np.ndarray,
        pos_score: np.ndarray,
        bins: int = MICRO_BINS,
    ) -> None:
        self.w = np.asarray(weights, dtype=np.float64)
        # The fold's per-interval sums in float32 (twice the SIMD width) where every one is an
        # integer below 2**24, so exact: at most the largest weight times the documents.
        exact32 = float(self.w.max(initial=0.0)) * n_docs < 2**24
        self.kind = np.float32 if exact32 else np.float64
        self.wt = np.ascontiguousarray(self.w.T)
        self.wt_fold = self.wt.astype(self.kind)
        self.n_docs, self.total = n_docs, total
        self.full_of = np.asarray(full_of, dtype=np.int64)
        self.width = len(self.full_of)
        self.gold_doc = np.asarray(gold_doc, dtype=np.int64)
        self.gold_label = np.asarray(gold_label, dtype=np.int64)
        self.pos_doc = np.asarray(pos_doc, dtype=np.int64)
        self.pos_col = np.asarray(pos_col, dtype=np.int64)
        self.pos_score = np.asarray(pos_score, dtype=np.float64)
        self.bins = bins
        replicates = self.w.shape[0]
        # macro: positives grouped by (column, distinct score)
        order = np.lexsort((self.pos_score, self.pos_col))
        col, score = self.pos_col[order], self.pos_score[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (col[1:] != col[:-1]) | (score[1:] != score[:-1])
        starts = np.flatnonzero(new)
        self.vals = score[starts]
        self.grp_ptr = np.append(starts, len(order)).astype(np.int64)
        self.grp_doc = self.pos_doc[order]
        self.val_ptr = np.searchsorted(col[starts], np.arange(self.width + 1)).astype(np.int64)
        self.lowest = np.full(self.width, np.inf)
        has = np.diff(self.val_ptr) > 0
        self.lowest[has] = self.vals[self.val_ptr[:-1][has]]
        k_max = int(np.diff(self.val_ptr).max(initial=0))
        self.scratch = np.zeros((max(2 * k_max, 1), replicates), dtype=self.kind)
        self.below = np.zeros(replicates, dtype=self.kind)
        self.pw = np.zeros(replicates, dtype=self.kind)
        self.doubled = np.zeros((self.width, replicates))
        self.active = np.zeros((self.width, replicates))
        # micro: per document its negatives per bin (placed with the first chunk)
        self.table: np.ndarray | None = None
        # per column, the weight of its unscored (-inf) block cells: not scored documents
        self.unscored_weight = np.zeros((self.width, replicates))
        # uint16 holds a document's cells of a bin below 65,536 columns (half the memory)
        small = self.width < np.iinfo(np.uint16).max
        self.counts = np.zeros((n_docs, bins), dtype=np.uint16 if small else np.int32)

    def _place_bins(self, sample: np.ndarray) -> None:
        """Bins at the quantiles of the positive scores and of ``sample`` (the first chunk's
        scores), half the bins each, merged: a bin then holds few positives *and* few
        negatives, so Σ P_b N_b (the bound) is small where the two overlap."""
        size = 1 << _PREFIX_BITS
        mass = np.zeros(size)
        for values in (self.pos_score, sample):
            if len(values):
                counts = np.bincount(ordered_prefix(values), minlength=size)
                mass += (np.cumsum(counts) - counts) / len(values)  # strictly before
        self.table = np.minimum((mass * self.bins / 2).astype(np.int64), self.bins - 1)

    def add(self, doc: np.ndarray, col: np.ndarray, score: np.ndarray) -> None:
        """Scored *negative* cells: their documents, compact columns and scores (any order)."""
        if self.table is None:
            self._place_bins(score)
        _bin_counts(ordered_prefix(score), np.asarray(doc, dtype=np.int64), self.table,
                    self.counts)  # fmt: skip
        keep = score >= self.lowest[col]
        doc, col, score = doc[keep], col[keep], score[keep]
        order = np.argsort(col, kind="stable")
        self._fold(doc[order], col[order], score[order])

    def add_block(self, block: np.ndarray, start: int, pos_rows: np.ndarray,
                  pos_cols: np.ndarray) -> None:  # fmt: skip
        """A dense block (documents ``start ..`` × the level's compact columns), its positive
        cells at ``(pos_rows, pos_cols)`` (block-local rows; scored ones only).

        A ``-inf`` cell is an unscored pair (a long file's missing row,
        :data:`hieval.inputs.dense_decisions.UNSCORED`): not a scored negative (taken back out
        of its document's bin), never active, and its document's weight not among its
        column's scored documents' (:meth:`finish` takes it off), as the long table, which has
        no row for it, never feeds it."""
        unscored = block == -np.inf
        some_unscored = bool(unscored.any())
        if self.table is None:
            self._place_bins(block[~unscored] if some_unscored else block.ravel())
        bits = np.ascontiguousarray(block, dtype=np.float32).view(np.uint32)
        _block_bins(bits, start, self.table, self.counts)
        del bits
        if some_unscored:
            lowest_bin = self.table[ordered_prefix(np.array([-np.inf]))[0]]
            rows = start + np.arange(block.shape[0])
            self.counts[rows, lowest_bin] -= unscored.sum(axis=1).astype(self.counts.dtype)
            weights = self.wt_fold[start : start + block.shape[0]]
            self.unscored_weight += unscored.T.astype(self.kind) @ weights
        del unscored
        if len(pos_rows):
            bins = self.table[ordered_prefix(block[pos_rows, pos_cols])]
            np.subtract.at(self.counts, (pos_rows + start, bins), 1)
        active = self.lowest[:, None] <= block.T
        active[pos_cols, pos_rows] = False
        cols, rows = np.nonzero(active)
        del active
        self._fold(rows + start, cols, block[rows, cols])

    def _fold(self, doc: np.ndarray, col: np.ndarray, score: np.ndarray) -> None:
        ptr = np.searchsorted(col, np.arange(self.width + 1)).astype(np.int64)
        positives = (self.val_ptr, self.vals, self.grp_ptr, self.grp_doc)
        state = (self.doubled, self.active, self.scratch, self.below, self.pw)
        _fold(ptr, doc.astype(np.int64), score.astype(np.float64), positives, self.wt_fold,
              state)  # fmt: skip

    def finish(self, scored_weight: np.ndarray) -> AucReplicates:
        """The replicates, given each column's scored documents' weight (replicates ×
        width; by blocks: the weight of the documents with a row, less the weight of each
        column's unscored cells, taken off here)."""
        w, replicates = self.w, self.w.shape[0]
        scored_weight = scored_weight - self.unscored_weight.T
        all_docs = w.sum(axis=1)
        gold = sparse.csr_matrix(
            (np.ones(len(self.gold_doc)), (self.gold_label, self.gold_doc)),
            shape=(self.total, self.n_docs),
        )
        positives = (gold @ self.wt).T  # replicates × labels
        scored = sparse.csr_matrix(
            (np.ones(len(self.pos_doc)), (self.pos_col, self.pos_doc)),
            shape=(self.width, self.n_docs),
        )
        scored_pos = (scored @ self.wt).T  # replicates × columns
        scored_neg = scored_weight - scored_pos
        inactive = scored_neg - self.active.T
        doubled = self.doubled.T + 2.0 * inactive * scored_pos
        full = np.zeros((3, replicates, self.total))
        for i, part in enumerate((doubled, scored_pos, scored_neg)):
            full[i][:, self.full_of] = part
        per_label = mann_whitney(full[0], full[1], full[2], positives,
                                 all_docs[:, None] - positives)  # fmt: skip
        macro = macro_mean(per_label, exact=True)
        micro, bound = self._micro(positives.sum(axis=1), all_docs)
        return AucReplicates(micro, macro, bound)

    def _micro(self, positives: np.ndarray, all_docs: np.ndarray):
        """Micro AUC from the bins, and each replicate's bound."""
        w = self.w
        # float32 products are twice as fast and exact while every sum is an integer below
        # 2**24: a bin's cells times the largest weight bounds each of its partial sums
        largest = float(w.max(initial=0.0)) * float(self.counts.sum(axis=0, dtype=np.int64).max())
        exact32 = largest < 2**24
        kind = np.float32 if exact32 else np.float64
        neg = np.zeros((w.shape[0], self.bins))
        step = max(1, (1 << 22) // self.bins)
        # one BLAS thread: on a shared 2-core machine OpenBLAS's threads spin (the product of
        # a MIMIC-IV model's leaves measured 1.5-1.8 s wall on two threads, 0.4-0.7 s on one)
        with threadpool_limits(limits=1, user_api="blas"):
            for first in range(0, self.n_docs, step):
                chunk = self.counts[first : first + step].astype(kind)
                neg += w[:, first : first + step].astype(kind) @ chunk
        if self.table is None:  # no scored negative was added
            self._place_bins(np.zeros(0))
        pos_bin = self.table[ordered_prefix(self.pos_score)]
        scored = sparse.csr_matrix(
            (np.ones(len(self.pos_doc)), (pos_bin, self.pos_doc)), shape=(self.bins, self.n_docs)
        )
        pos = (scored @ self.wt).T
        below = np.cumsum(neg, axis=1) - neg
        doubled = (pos * (2.0 * below + neg)).sum(axis=1)
        scored_pos, scored_neg = pos.sum(axis=1), neg.sum(axis=1)
        negatives = self.total * all_docs - positives
        micro = mann_whitney(doubled, scored_pos, scored_neg, positives, negatives)
        with np.errstate(invalid="ignore", divide="ignore"):
            bound = (pos * neg).sum(axis=1) / (2.0 * positives * negatives)
        return micro, np.where(np.isnan(micro), np.nan, bound)
