"""Bootstrap and randomization replicates of ROC-AUC (micro and macro): weighted Mann-Whitney.

A replicate gives document d a weight w_d (a bootstrap's Poisson count; in the randomization
test a swapped model is one model's pairs weighted 1 − s_d pooled with the other's weighted
s_d). A (document, code) pair of the label space weighs its document's weight, and

    AUC = Σ_{positive i, negative j} w_i w_j ([x_i > x_j] + ½ [x_i = x_j]) / (W_pos · W_neg),

which for integer weights is the AUC of the test set with each document repeated w_d times
over the same label space, and for weights all 1 the point estimate: both are
:func:`hieval.metrics.ranking.mann_whitney` of weighted pair sums (the point estimate finds
its sums, every weight 1, by binary search: :func:`~hieval.metrics.ranking.micro_auc`,
:func:`~hieval.metrics.ranking.per_label_auc`), and macro AUC is
:func:`~hieval.metrics.ranking.macro_mean` of the labels' values either way.
``micro`` is over every pair of the label space; ``macro`` the mean, over the labels with
positive *and* negative weight in the replicate, of each label's AUC over the documents.

How it stays fast without a (document × code) matrix: the unscored pairs of the label space
all tie below every scored pair (as the point estimate has them), so they enter through
per-document and per-label counts alone (positives and negatives of the label space, minus
the scored ones). The scored pairs are sorted once (by score; for macro by label, then score)
when the tables are built, not per replicate, and the sorted negatives are cut where a
positive's tie group or a label starts or ends. For a block of replicates one sparse product
(intervals × documents counts, times the weights) gives each interval's weighted negatives, a
cumulative sum over the intervals the weighted negatives below each cut, and each scored
positive adds w_i × (below + ½ tied). The weights are integers (bootstrap counts, 0/1 swaps),
so every sum is an integer (doubled: halves never appear) held exactly by float64 below
2**53, whatever the order of summation; only the final division rounds. A MIMIC-sized model
(3,372 documents, 8,922 labels, its top 100 scores per document: 337,200 scored pairs) takes
1.2-1.5 s for 1,000 bootstrap replicates of micro and macro AUC at one level, a pair of them
1.8-3.9 s for 999 permutations (benchmarks/auc_uncertainty_benchmark.py, on the shared 2-core
machine; a first version with a cumulative sum over every sorted pair took 4.5 s and 19.5 s).
Sorting is the cost that grows with the scored pairs: with every pair scored (30M) one
model's plan takes about 33 s and the process about 10 GB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from hieval.metrics.ranking import ScoreArrays, macro_mean, mann_whitney

MICRO, MACRO = "micro", "macro"
#: Above this many scored pairs at a level, a model's ROC-AUC rows are not replicated from this
#: plan (the pairs sorted, their sparse counts: about 0.3 KB and 1 µs per pair, so a model
#: scoring every pair of MIMIC-III full, 30M, would take ~10 GB and half a minute per model and
#: pair) but by :mod:`hieval.metrics.uncertainty.auc_blocks` (bootstrap only: macro exact, micro
#: within a bound; comparisons get :mod:`hieval.metrics.uncertainty.bootstrap_test`'s test).
#: 4M holds each document's top 1,000 codes of MIMIC-III full's 3,372 test documents.
AUC_MAX_SCORED_PAIRS = 4_000_000
#: Dense (replicates × scored pairs) arrays of one block stay near this many values (32 MB).
_BLOCK_CELLS = 1 << 22


@dataclass(frozen=True)
class AucPairs:
    """One model's pairs at one level for weighted Mann-Whitney statistics.

    ``doc``, ``label``, ``score``, ``positive`` describe the scored pairs; ``gold_doc`` and
    ``gold_label`` every positive pair of the label space (scored or not). ``labels`` names the
    label indices, so that two models' labels can be matched when their pairs are pooled.
    """

    n_docs: int
    labels: tuple[str, ...]
    doc: np.ndarray
    label: np.ndarray
    score: np.ndarray
    positive: np.ndarray
    gold_doc: np.ndarray
    gold_label: np.ndarray

    @property
    def n_labels(self) -> int:
        return len(self.labels)

    def defined(self) -> dict[str, bool]:
        """Which AUC rows the point estimate has: micro with a positive and a negative pair,
        macro with a label that has a positive and a negative document."""
        pairs = self.n_docs * self.n_labels
        support = np.bincount(self.gold_label, minlength=self.n_labels)
        return {
            MICRO: 0 < len(self.gold_doc) < pairs,
            MACRO: bool(np.any((support > 0) & (support < self.n_docs))),
        }


def auc_pairs(arrays: ScoreArrays) -> AucPairs:
    """The :class:`AucPairs` of a model's :class:`~hieval.metrics.ranking.ScoreArrays` (leaf or
    a level's max-pooled view); unnamed labels are named by their index."""
    n = arrays.n_labels
    labels = arrays.labels if len(arrays.labels) == n else tuple(str(i) for i in range(n))
    found, index = arrays.gold_found()
    positive = np.zeros(len(arrays.key), dtype=bool)
    positive[index[found]] = True
    return AucPairs(
        n_docs=arrays.n_docs,
        labels=tuple(labels),
        doc=arrays.key // n if n else arrays.key,
        label=arrays.key % n if n else arrays.key,
        score=arrays.score,
        positive=positive,
        gold_doc=arrays.gold_key // n if n else arrays.gold_key,
        gold_label=arrays.gold_key % n if n else arrays.gold_key,
    )


@dataclass(frozen=True)
class _Sorted:
    """Scored pairs sorted by (segment, score) (micro: one segment; macro: a label each), as
    sparse counts over the stacked weight columns (component × documents + document).

    Only the weighted negatives below each positive's tie group, up to its end and below its
    segment are needed, so the sorted negatives are cut at those positions (``cuts``) and
    ``negatives`` counts each interval's negatives per column: one sparse product gives every
    interval's weight, a cumulative sum over the intervals (not over every pair) the weights
    below each cut. ``lo``, ``hi``, ``base`` index those sums for each positive; ``seg_lo`` and
    ``seg_hi`` for each segment.
    """

    negatives: sparse.csr_matrix  # intervals × columns
    pos_col: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    base: np.ndarray
    seg_lo: np.ndarray
    seg_hi: np.ndarray
    pos_segment: sparse.csr_matrix  # segments × positives (indicator)
    positives: sparse.csr_matrix  # segments × columns: scored positives


def _sorted(col: np.ndarray, segment: np.ndarray, score: np.ndarray, positive: np.ndarray,
            n_segments: int, width: int) -> _Sorted:  # fmt: skip
    # one segment (micro): the scores alone; the order within a tie group does not matter
    order = np.argsort(score, kind="stable") if n_segments == 1 else np.lexsort((score, segment))
    col, segment, score, positive = col[order], segment[order], score[order], positive[order]
    n = len(order)
    new_group = np.ones(n, dtype=bool)
    if n:
        new_group[1:] = (segment[1:] != segment[:-1]) | (score[1:] != score[:-1])
    group = np.cumsum(new_group) - 1
    group_start = np.flatnonzero(new_group)
    group_end = np.append(group_start[1:], n)
    negative = ~positive
    neg_before = np.concatenate([[0], np.cumsum(negative)])  # negatives before position i
    pos_segment = segment[positive]
    neg_starts = np.searchsorted(segment[negative], np.arange(n_segments + 1))
    lo = neg_before[group_start[group[positive]]]
    hi = neg_before[group_end[group[positive]]]
    base = neg_starts[pos_segment]
    cuts = np.unique(np.concatenate([[0], lo, hi, base, neg_starts]))
    n_pos, n_neg = len(pos_segment), int(neg_starts[-1])
    index = np.int32 if width < np.iinfo(np.int32).max else np.int64
    return _Sorted(
        # row i: the sorted negatives cuts[i] .. cuts[i + 1] - 1, built as CSR directly (the
        # negatives are in row order already): no (row, column) pairs to sort at 30M pairs
        negatives=sparse.csr_matrix(
            (np.ones(n_neg), col[negative].astype(index), np.append(cuts, n_neg).astype(index)),
            shape=(len(cuts), width),
        ),
        pos_col=col[positive],
        lo=np.searchsorted(cuts, lo),
        hi=np.searchsorted(cuts, hi),
        base=np.searchsorted(cuts, base),
        seg_lo=np.searchsorted(cuts, neg_starts[:-1]),
        seg_hi=np.searchsorted(cuts, neg_starts[1:]),
        pos_segment=sparse.csr_matrix(
            (np.ones(n_pos), (pos_segment, np.arange(n_pos))), shape=(n_segments, n_pos)
        ),
        positives=sparse.csr_matrix(
            (np.ones(n_pos), (pos_segment, col[positive])), shape=(n_segments, width)
        ),
    )


@dataclass(frozen=True)
class AucPlan:
    """One or more models' pairs at one level, sorted together once (:func:`auc_plan`): a
    bootstrap replicate weighs one model's documents, a swap two models' (pooled)."""

    n_docs: int
    n_components: int
    micro: _Sorted
    macro: _Sorted
    positives: np.ndarray  # per stacked column: positive pairs of the document's label space
    space: np.ndarray  # per component: the size of its label space
    in_space: np.ndarray  # components × union labels: the label is in that model's space
    gold: sparse.csr_matrix  # stacked columns × union labels: positive pairs


def auc_plan(models: Sequence[AucPairs]) -> AucPlan:
    """Sort the scored pairs of ``models`` (over the same documents) once, for
    :func:`auc_replicates` with one weight matrix per model."""
    n_docs = models[0].n_docs
    if any(m.n_docs != n_docs for m in models):
        raise ValueError("pooled AUC pairs must cover the same documents")
    union = sorted(set().union(*(m.labels for m in models)))
    where = {name: i for i, name in enumerate(union)}
    maps = [np.array([where[name] for name in m.labels], dtype=np.int64) for m in models]
    offset = [c * n_docs for c in range(len(models))]
    col = np.concatenate([m.doc + o for m, o in zip(models, offset, strict=True)])
    col = col.astype(np.int64)
    label = np.concatenate([mp[m.label] for m, mp in zip(models, maps, strict=True)])
    label = label.astype(np.int64)
    score = np.concatenate([m.score for m in models]).astype(np.float64)
    positive = np.concatenate([m.positive for m in models]).astype(bool)
    gold_col = np.concatenate([m.gold_doc + o for m, o in zip(models, offset, strict=True)])
    gold_label = np.concatenate([mp[m.gold_label] for m, mp in zip(models, maps, strict=True)])
    in_space = np.zeros((len(models), len(union)), dtype=bool)
    for c, mp in enumerate(maps):
        in_space[c, mp] = True
    width = len(models) * n_docs
    return AucPlan(
        n_docs=n_docs,
        n_components=len(models),
        micro=_sorted(col, np.zeros_like(col), score, positive, 1, width),
        macro=_sorted(col, label, score, positive, len(union), width),
        positives=np.bincount(gold_col.astype(np.int64), minlength=width).astype(np.float64),
        space=np.array([m.n_labels for m in models], dtype=np.float64),
        in_space=in_space,
        gold=sparse.csr_matrix(
            (np.ones(len(gold_col)), (gold_col.astype(np.int64), gold_label.astype(np.int64))),
            shape=(width, len(union)),
        ),
    )


def _doubled_scored(s: _Sorted, w: np.ndarray, wt: np.ndarray):
    """Per replicate (rows of ``w``; ``wt`` its transpose, contiguous) and segment:
    2 × Σ_{scored positive i} w_i (weighted scored negatives below + ½ tied), the scored
    positives' and the scored negatives' weights."""
    below = np.zeros((w.shape[0], s.negatives.shape[0] + 1))
    np.cumsum((s.negatives @ wt).T, axis=1, out=below[:, 1:])
    contrib = w[:, s.pos_col] * (below[:, s.lo] + below[:, s.hi] - 2.0 * below[:, s.base])
    doubled = (s.pos_segment @ contrib.T).T
    scored_pos = (s.positives @ wt).T
    return doubled, scored_pos, below[:, s.seg_hi] - below[:, s.seg_lo]


def auc_replicates(
    plan: AucPlan, weights: Sequence[np.ndarray], *, exact: bool = True
) -> dict[str, np.ndarray]:
    """``micro`` and ``macro`` AUC of each row of the weights (one replicates × documents
    matrix per pooled model, in :func:`auc_plan`'s order); NaN where undefined (no positive or
    negative weight; macro: no label with both). ``exact``: macro's mean correctly rounded
    (:func:`~hieval.metrics.ranking.macro_mean`; micro's sums are exact integers anyway)."""
    if len(weights) != plan.n_components:
        raise ValueError("one weight matrix per pooled model")
    stacked = np.hstack([np.asarray(w, dtype=np.float64) for w in weights])
    rows = stacked.shape[0]
    n_labels = plan.in_space.shape[1]
    intervals = max(plan.micro.negatives.shape[0], plan.macro.negatives.shape[0])
    widest = max(intervals, len(plan.micro.pos_col), n_labels, 1)
    step = max(1, _BLOCK_CELLS // widest)
    micro, macro = np.empty(rows), np.empty(rows)
    for first in range(0, rows, step):
        w = stacked[first : first + step]
        wt = np.ascontiguousarray(w.T)
        w_pos = w @ plan.positives
        docs = np.column_stack([w[:, c * plan.n_docs : (c + 1) * plan.n_docs].sum(1)
                                for c in range(plan.n_components)])  # fmt: skip
        w_all = docs @ plan.space
        doubled, scored_pos, scored_neg = _doubled_scored(plan.micro, w, wt)
        micro[first : first + len(w)] = mann_whitney(
            doubled[:, 0], scored_pos[:, 0], scored_neg[:, 0], w_pos, w_all - w_pos
        )
        label_pos = (plan.gold.T @ wt).T
        label_neg = docs @ plan.in_space - label_pos
        doubled, scored_pos, scored_neg = _doubled_scored(plan.macro, w, wt)
        per_label = mann_whitney(doubled, scored_pos, scored_neg, label_pos, label_neg)
        macro[first : first + len(w)] = macro_mean(per_label, exact=exact)
    return {MICRO: micro, MACRO: macro}
