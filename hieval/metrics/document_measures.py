"""The per-document statistics of the ranking family's ``mean`` metrics (P@K, R@K, R-precision,
MAP, nDCG@K, PSP@K, PSnDCG@K): each declared once, with the documents its mean runs over.

A ranking ``mean`` metric is a per-document value averaged over a declared set of documents
(:class:`DocumentMean`). The reported value (:func:`hieval.metrics.ranking.point_values`) is
the exact mean of the values over the counted documents; a bootstrap or permutation replicate
(:mod:`hieval.metrics.uncertainty.ranking`) is Σ w·value / Σ w·[counted], from the same
per-document arrays. Nothing here dispatches on a metric's name.

Ties: a document's codes are ranked by score, ties by code (label index), unscored codes
after every scored one in code order (:func:`hieval.metrics.ranking.document_ranks`); every
@K metric, nDCG@K included, counts the gold codes among these first K. Only MAP treats tied
scores as one threshold (as scikit-learn's ``average_precision_score``).

Imports nothing of :mod:`hieval.metrics.registry`, which declares the metrics with these
statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

#: The documents a mean runs over: every gold document, or those with a gold code.
ALL_DOCUMENTS, GOLD_DOCUMENTS = "docs", "gold_docs"


@dataclass(frozen=True)
class DocumentRanks:
    """Per gold pair: its document, its position in the document's ranking (0-based, ties by
    code, unscored codes after the scored ones in code order) and the precision at its score
    threshold (tied scores one threshold, unscored pairs the last one)."""

    doc: np.ndarray
    position: np.ndarray
    precision: np.ndarray


@dataclass(frozen=True)
class RankedDocuments:
    """What every per-document statistic is a function of: the gold pairs' ranks
    (:class:`DocumentRanks`, sorted by document) over ``n_docs`` documents and, with a
    training gold, each gold pair's gain (its code's inverse propensity,
    :mod:`hieval.metrics.propensity`; None without one, or at a pooled level)."""

    ranks: DocumentRanks
    n_docs: int
    gain: np.ndarray | None = None

    @cached_property
    def n_gold(self) -> np.ndarray:
        """Each document's number of gold codes."""
        return np.bincount(self.ranks.doc, minlength=self.n_docs)

    @cached_property
    def with_gold(self) -> np.ndarray:
        return self.n_gold > 0

    @cached_property
    def safe_gold(self) -> np.ndarray:
        """The number of gold codes, 1 for documents without (their values are 0, unused)."""
        return np.maximum(self.n_gold, 1)

    def counted(self, over: str) -> np.ndarray:
        """Which documents a mean over ``over`` counts (bool per document)."""
        if over == ALL_DOCUMENTS:
            return np.ones(self.n_docs, dtype=bool)
        if over == GOLD_DOCUMENTS:
            return self.with_gold
        raise ValueError(f"unknown document set {over!r}")

    @cached_property
    def gain_rank(self) -> np.ndarray:
        """Per gold pair, its place (0-based) among its document's gold pairs by gain,
        highest first: the best ranking a model could give them."""
        doc = self.ranks.doc
        order = np.lexsort((-self.gain, doc))
        starts = np.searchsorted(doc, np.arange(self.n_docs + 1))
        rank = np.empty(len(doc), dtype=np.int64)
        rank[order] = np.arange(len(doc)) - starts[doc[order]]
        return rank

    def hits(self, limit: np.ndarray | int) -> np.ndarray:
        """Per document, its gold codes among its first ``limit`` (one per document, or one
        for all)."""
        ranks = self.ranks
        inside = ranks.position < (limit if np.isscalar(limit) else limit[ranks.doc])
        return np.bincount(ranks.doc[inside], minlength=self.n_docs)


Statistic = Callable[[RankedDocuments, int | None], np.ndarray]


@dataclass(frozen=True)
class DocumentMean:
    """A ranking metric that is a mean over documents: its per-document ``statistic`` (of the
    documents and K, None for the metrics without K; 0 where a document is not counted) and
    the documents it averages over (``over``: :data:`ALL_DOCUMENTS` or
    :data:`GOLD_DOCUMENTS`), which is the replicate's denominator.

    With ``best`` (the per-document value of the best ranking), the metric is Σ statistic /
    Σ best over the counted documents instead: pyxclib's propensity-scored metrics divide the
    mean over documents by the mean of the best achievable values, not each document by its
    own. A statistic is None where the documents lack what it needs (gains)."""

    statistic: Statistic
    over: str
    best: Statistic | None = None


def precision_at(docs: RankedDocuments, k: int | None) -> np.ndarray:
    """Gold codes among the K highest-scored / K."""
    return docs.hits(k) / k


def recall_at(docs: RankedDocuments, k: int | None) -> np.ndarray:
    """Gold codes among the K highest-scored / the document's gold codes."""
    return np.where(docs.with_gold, docs.hits(k) / docs.safe_gold, 0.0)


def r_precision(docs: RankedDocuments, k: int | None = None) -> np.ndarray:
    """Precision at K = the document's number of gold codes."""
    return np.where(docs.with_gold, docs.hits(docs.n_gold) / docs.safe_gold, 0.0)


def average_precision(docs: RankedDocuments, k: int | None = None) -> np.ndarray:
    """AP = (1/|G|) x the sum over gold pairs of the precision at their threshold; the sum per
    document is exact (``math.fsum``), so the value does not depend on pair order."""
    precision = docs.ranks.precision
    starts = np.searchsorted(docs.ranks.doc, np.arange(docs.n_docs + 1))
    ap = np.zeros(docs.n_docs)
    for d in np.flatnonzero(docs.with_gold):
        a, b = starts[d], starts[d + 1]
        ap[d] = math.fsum(precision[a:b]) / (b - a)
    return ap


def ndcg_at(docs: RankedDocuments, k: int | None) -> np.ndarray:
    """DCG@K / ideal DCG@K with binary gains and the log2 discount 1 / log2(position + 2)
    (position 0-based): DCG sums the discounts of the gold codes among the first K, the ideal
    the first min(K, |G|) discounts."""
    ranks = docs.ranks
    inside = ranks.position < k
    gain = 1.0 / np.log2(ranks.position[inside] + 2.0)
    dcg = np.bincount(ranks.doc[inside], weights=gain, minlength=docs.n_docs)
    best = _discounts(k)[np.minimum(docs.n_gold, k)]
    return np.where(docs.with_gold, dcg / np.where(docs.with_gold, best, 1.0), 0.0)


def _discounts(k: int) -> np.ndarray:
    """Cumulative log2 discounts: entry j is the ideal binary DCG of j gold codes."""
    return np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(k) + 2.0))])


def _gain_sum(docs: RankedDocuments, place: np.ndarray, k: int, discounted: bool) -> np.ndarray:
    """Per document, the gains of its gold pairs whose ``place`` is among the first K,
    divided by log2(place + 2) when ``discounted``."""
    inside = place < k
    gain = docs.gain[inside]
    if discounted:
        gain = gain / np.log2(place[inside] + 2.0)
    return np.bincount(docs.ranks.doc[inside], weights=gain, minlength=docs.n_docs)


def ps_precision_at(docs: RankedDocuments, k: int | None) -> np.ndarray | None:
    """The gains (inverse propensities) of the gold codes among the K highest-scored / K."""
    if docs.gain is None:
        return None
    return _gain_sum(docs, docs.ranks.position, k, discounted=False) / k


def best_ps_precision_at(docs: RankedDocuments, k: int | None) -> np.ndarray | None:
    """The same of the best ranking: the K largest gains among the document's gold codes / K."""
    if docs.gain is None:
        return None
    return _gain_sum(docs, docs.gain_rank, k, discounted=False) / k


def _ps_ndcg(docs: RankedDocuments, k: int, place: np.ndarray) -> np.ndarray | None:
    """Propensity-weighted DCG@K of the gold codes at ``place`` / the binary ideal DCG@K
    (the first min(K, |G|) discounts), as pyxclib's ``psndcg`` normalises each document."""
    if docs.gain is None:
        return None
    dcg = _gain_sum(docs, place, k, discounted=True)
    ideal = _discounts(k)[np.minimum(docs.n_gold, k)]
    return np.where(docs.with_gold, dcg / np.where(docs.with_gold, ideal, 1.0), 0.0)


def ps_ndcg_at(docs: RankedDocuments, k: int | None) -> np.ndarray | None:
    """Σ gain / log2(rank + 1) over the gold codes among the K highest-scored, / ideal DCG@K."""
    return _ps_ndcg(docs, k, docs.ranks.position)


def best_ps_ndcg_at(docs: RankedDocuments, k: int | None) -> np.ndarray | None:
    """The same of the best ranking (the gold codes by gain, highest first)."""
    return None if docs.gain is None else _ps_ndcg(docs, k, docs.gain_rank)
