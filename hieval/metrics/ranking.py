"""Ranking and calibration metrics from a model's scores: AUC, P@K, R@K, R-precision, MAP,
Brier score and ECE, at the leaf level and, by max-pooling, at each level of the hierarchy.

The engine counts sets; these metrics need each document's and each code's ordering of scores
instead. They are computed with numpy from sorted arrays, never from a (document x code)
matrix of the label space, because score files are often truncated (CAML keeps each document's
top 100) and the label space can be far larger than the scored pairs:

- Every metric is a statement about *gold* pairs: where each gold (document, code) pair ranks
  among its document's scores, among its code's scores, or among all scores. So each gold pair
  is located by binary search (``np.searchsorted``) in sorted score arrays; nothing is ever
  arg-sorted over the whole table. One global sort (micro AUC), one sort per code (macro AUC)
  and one per document (@K, R-precision, MAP) is all the sorting there is.
- A pair of the label space the model did not score ranks below every scored pair: for AUC
  they are all tied (average rank), for the @K metrics they follow the scored codes in code
  order, for MAP they form one last threshold.

Definitions (docs/scores.md states them too):

- label space: the gold's codes plus the codes the model scored; documents: the gold's.
- ``auc`` ``micro``: ROC-AUC over every (document, code) pair of the label space
  (Mann-Whitney U with average ranks for ties, which is what scikit-learn's trapezoids give).
- ``auc`` ``macro``: mean over codes with at least one positive and one negative gold document
  of that code's ROC-AUC over the documents.
- ``precision@K`` ``mean``: gold codes among the document's K highest-scored (ties by code) / K,
  averaged over every gold document (CAML).
- ``recall@K`` ``mean``: the same hits / the document's number of gold codes, averaged over
  documents with a gold code; ``r_precision``: hits at K = the number of gold codes / that number.
- ``map`` ``mean``: scikit-learn's ``average_precision_score`` of each document's ranking (tied
  scores form one threshold), averaged over documents with a gold code.
- ``brier`` / ``ece`` ``micro``: over the label space, unscored pairs scoring 0; ECE with 15
  equal-width bins on [0, 1] (the last one closed), for scores in [0, 1] only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from hieval.metrics.document_measures import DocumentRanks, RankedDocuments
from hieval.metrics.registry import (
    DOCUMENT_MEANS,
    LEAF,
    TIDY_SCHEMA,
    at_ks,
    exact_mean,
    sort_tidy,
)

log = logging.getLogger(__name__)

DEFAULT_KS = (5, 8, 15)
ECE_BINS = 15


@dataclass(frozen=True)
class ScoreArrays:
    """A model's scores and the gold as integer pairs over ``n_docs`` x ``n_labels``.

    ``key`` = document x n_labels + label, for the scored pairs (sorted, unique, with ``score``
    aligned) and the gold pairs (``gold_key``, sorted, unique). Label indices follow code order,
    so that "ties are ordered by code" is "ties are ordered by label index".
    """

    n_docs: int
    n_labels: int
    key: np.ndarray
    score: np.ndarray
    gold_key: np.ndarray
    labels: tuple[str, ...] = ()

    @property
    def pairs(self) -> int:
        """Pairs of the label space (documents x labels)."""
        return self.n_docs * self.n_labels

    @property
    def unscored(self) -> int:
        """Pairs of the label space the model gave no score."""
        return self.pairs - len(self.key)

    def gold_found(self) -> tuple[np.ndarray, np.ndarray]:
        """For each gold pair: whether it is scored, and its index among the scored pairs."""
        index = np.searchsorted(self.key, self.gold_key)
        clipped = np.minimum(index, max(len(self.key) - 1, 0))
        found = (
            (index < len(self.key)) & (self.key[clipped] == self.gold_key)
            if len(self.key)
            else np.zeros(len(self.gold_key), dtype=bool)
        )
        return found, clipped


def arrays_from_pairs(
    n_docs: int,
    n_labels: int,
    key: np.ndarray,
    score: np.ndarray,
    gold_key: np.ndarray,
    labels: Sequence[str] = (),
) -> ScoreArrays:
    """Sort and check the pairs (keys unique, scores finite) into :class:`ScoreArrays`."""
    key = np.asarray(key, dtype=np.int64)
    score = np.asarray(score, dtype=np.float64)
    if len(key) > 1 and not bool(np.all(key[1:] > key[:-1])):
        order = np.argsort(key, kind="stable")
        key, score = key[order], score[order]
        if bool(np.any(key[1:] == key[:-1])):
            raise ValueError("scored (document, code) pairs must be unique")
    if not bool(np.all(np.isfinite(score))):
        raise ValueError("scores must be finite")
    gold_key = np.unique(np.asarray(gold_key, dtype=np.int64))
    return ScoreArrays(n_docs, n_labels, key, score, gold_key, tuple(labels))


def encode(gold: pl.DataFrame, scores: pl.DataFrame) -> ScoreArrays:
    """Index a normalised gold (``doc_id, code``; a null code declares an empty document) and a
    score table (``doc_id, code, score``) over the gold's documents and the label space.

    Score rows of documents outside the gold are ignored (normalisation already refused or
    dropped them); duplicated pairs keep their highest score.
    """
    docs = gold["doc_id"].unique().sort()
    codes = pl.concat([gold["code"].drop_nulls(), scores["code"].drop_nulls()]).unique().sort()
    doc_index = pl.DataFrame({"doc_id": docs, "d": np.arange(len(docs), dtype=np.int64)})
    code_index = pl.DataFrame({"code": codes, "c": np.arange(len(codes), dtype=np.int64)})
    n_labels = len(codes)

    def keys(frame: pl.DataFrame, with_score: bool) -> pl.DataFrame:
        cols = ["doc_id", "code", *(["score"] if with_score else [])]
        return (
            frame.select(cols)
            .drop_nulls("code")
            .join(doc_index, on="doc_id", how="inner")
            .join(code_index, on="code", how="inner")
            .select((pl.col("d") * n_labels + pl.col("c")).alias("key"), *cols[2:])
        )

    scored = keys(scores, True).group_by("key").agg(pl.col("score").max()).sort("key")
    gold_keys = keys(gold, False)["key"].to_numpy()
    return arrays_from_pairs(
        len(docs),
        n_labels,
        scored["key"].to_numpy(),
        scored["score"].to_numpy(),
        gold_keys,
        codes.to_list(),
    )


def _doubled_rank_sum(sorted_all: np.ndarray, positives: np.ndarray, unscored: int) -> int:
    """Twice the sum of the average ranks (1-based, ascending) of ``positives`` among
    ``sorted_all`` placed above ``unscored`` tied bottom values (integers: exact)."""
    if not len(positives):
        return 0
    left = np.searchsorted(sorted_all, positives, side="left")
    right = np.searchsorted(sorted_all, positives, side="right")
    return int(left.sum(dtype=np.int64) + right.sum(dtype=np.int64)) + len(positives) * (
        2 * unscored + 1
    )


def _auc(doubled_ranks: int, positives: int, negatives: int) -> float:
    """Mann-Whitney: (R+ - P(P+1)/2) / (P N) with R+ given doubled."""
    return (doubled_ranks - positives * (positives + 1)) / (2 * positives * negatives)


def micro_auc(arrays: ScoreArrays) -> float | None:
    """ROC-AUC over every pair of the label space (None without positives or negatives)."""
    positives = len(arrays.gold_key)
    negatives = arrays.pairs - positives
    if positives == 0 or negatives == 0:
        return None
    found, index = arrays.gold_found()
    unscored = arrays.unscored
    doubled = _doubled_rank_sum(np.sort(arrays.score), arrays.score[index[found]], unscored)
    doubled += int((~found).sum()) * (unscored + 1)  # unscored positives: average bottom rank
    return _auc(doubled, positives, negatives)


def by_label(arrays: ScoreArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scores grouped by label (label-major, any order within), and each label's run."""
    label = arrays.key % arrays.n_labels
    small = np.uint16 if arrays.n_labels <= np.iinfo(np.uint16).max else np.int64
    order = np.argsort(label.astype(small), kind="stable")  # a radix sort for uint16
    counts = np.bincount(label, minlength=arrays.n_labels)
    starts = np.concatenate([[0], np.cumsum(counts)])
    return arrays.score[order], starts, counts


def per_label_auc(arrays: ScoreArrays) -> np.ndarray:
    """Each label's ROC-AUC over the documents (NaN where it has no positive or no negative)."""
    n_docs = arrays.n_docs
    gold_label = arrays.gold_key % arrays.n_labels
    support = np.bincount(gold_label, minlength=arrays.n_labels)
    found, index = arrays.gold_found()
    pos_label = gold_label[found]
    pos_score = arrays.score[index[found]]
    order = np.argsort(pos_label, kind="stable")
    pos_label, pos_score = pos_label[order], pos_score[order]
    pos_starts = np.searchsorted(pos_label, np.arange(arrays.n_labels + 1))
    grouped, starts, counts = by_label(arrays)
    auc = np.full(arrays.n_labels, np.nan)
    for c in np.flatnonzero((support > 0) & (support < n_docs)):
        column = np.sort(grouped[starts[c] : starts[c + 1]])
        unscored = n_docs - int(counts[c])
        scored_pos = pos_score[pos_starts[c] : pos_starts[c + 1]]
        doubled = _doubled_rank_sum(column, scored_pos, unscored)
        doubled += (int(support[c]) - len(scored_pos)) * (unscored + 1)
        auc[c] = _auc(doubled, int(support[c]), n_docs - int(support[c]))
    return auc


def document_ranks(arrays: ScoreArrays) -> DocumentRanks:
    """Locate every gold pair in its document's ranking (one sort per document)."""
    n_labels = arrays.n_labels
    doc = arrays.key // n_labels
    label = arrays.key % n_labels
    starts = np.searchsorted(doc, np.arange(arrays.n_docs + 1))
    gold_doc = arrays.gold_key // n_labels
    gold_label = arrays.gold_key % n_labels
    gold_starts = np.searchsorted(gold_doc, np.arange(arrays.n_docs + 1))
    found, index = arrays.gold_found()
    position = np.empty(len(arrays.gold_key), dtype=np.int64)
    precision = np.empty(len(arrays.gold_key), dtype=np.float64)
    for d in np.flatnonzero(gold_starts[1:] > gold_starts[:-1]):
        a, b = starts[d], starts[d + 1]
        ga, gb = gold_starts[d], gold_starts[d + 1]
        scores, labels = arrays.score[a:b], label[a:b]
        ranked = np.sort(scores)
        n = b - a
        hit = found[ga:gb]
        size = gb - ga
        pos = np.empty(size, dtype=np.int64)
        prec = np.empty(size, dtype=np.float64)
        if hit.any():
            values = arrays.score[index[ga:gb][hit]]
            above = n - np.searchsorted(ranked, values, side="right")
            at_least = n - np.searchsorted(ranked, values, side="left")
            tied = at_least - above > 1
            if tied.any():  # ties are ordered by code: count tied codes before this one
                own = gold_label[ga:gb][hit]
                for i in np.flatnonzero(tied):
                    above[i] += np.count_nonzero((scores == values[i]) & (labels < own[i]))
            pos[hit] = above
            gold_sorted = np.sort(values)
            true_at_least = len(values) - np.searchsorted(gold_sorted, values, side="left")
            prec[hit] = true_at_least / at_least
        miss = ~hit
        if miss.any():
            own = gold_label[ga:gb][miss]
            pos[miss] = n + own - np.searchsorted(labels, own)
            prec[miss] = size / n_labels  # the last threshold holds the whole label space
        position[ga:gb] = pos
        precision[ga:gb] = prec
    return DocumentRanks(gold_doc, position, precision)


def point_values(arrays: ScoreArrays, ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """Every ranking metric's reported value by (average, metric) name: ``micro auc``,
    ``macro auc``, ``mean precision@K``, ... (a metric without any defined unit is left out).

    The ``mean`` metrics are their registry declarations' per-document statistics
    (:data:`~hieval.metrics.registry.DOCUMENT_MEANS`), averaged exactly over the documents
    each counts: the same arrays the replicates weight
    (:mod:`hieval.metrics.uncertainty.ranking`)."""
    values: dict[str, float] = {}
    micro = micro_auc(arrays)
    if micro is not None:
        values["micro", "auc"] = micro
    per_label = per_label_auc(arrays)
    defined = per_label[~np.isnan(per_label)]
    if len(defined):
        values["macro", "auc"] = exact_mean(defined.tolist())
    if arrays.n_docs == 0:
        return values
    docs = RankedDocuments(document_ranks(arrays), arrays.n_docs)
    for metric in DOCUMENT_MEANS:
        counted = docs.counted(metric.per_document.over)
        if not counted.any():
            continue
        for name, k in at_ks(metric.metric, ks):
            per_doc = metric.per_document.statistic(docs, k)
            values[metric.average, name] = exact_mean(per_doc[counted].tolist())
    return values


def calibration_values(arrays: ScoreArrays, bins: int = ECE_BINS) -> dict[str, float] | None:
    """Brier score and ECE over the label space (unscored pairs score 0), or None when a score
    lies outside [0, 1] (they are then no probabilities)."""
    score = arrays.score
    if arrays.pairs == 0 or (len(score) and (score.min() < 0 or score.max() > 1)):
        return None
    found, index = arrays.gold_found()
    truth = np.zeros(len(score), dtype=bool)
    truth[index[found]] = True
    missed = int((~found).sum())  # gold pairs the model did not score: score 0, truth 1
    error = score - truth
    # numpy's pairwise sum: accurate to a few ulps and, for the same (sorted) pairs, the same
    # bits on every run; math.fsum over 30M Python floats would cost seconds.
    squared = float(np.sum(error * error)) + missed
    bin_of = np.minimum((score * bins).astype(np.int64), bins - 1)
    score_sum = np.bincount(bin_of, weights=score, minlength=bins)
    true_sum = np.bincount(bin_of[truth], minlength=bins).astype(np.float64)
    true_sum[0] += missed
    gaps = np.abs(true_sum - score_sum)
    return {"brier": squared / arrays.pairs, "ece": math.fsum(gaps) / arrays.pairs}


def pool(arrays: ScoreArrays, node_of: np.ndarray, n_nodes: int) -> ScoreArrays:
    """The scores and gold one level up: a node's score is the maximum of its descendants'
    scores, its gold "any gold descendant". ``node_of[label]`` is the label's node at that
    level, or -1 where it has none (it is left out there)."""
    n_labels = arrays.n_labels
    doc = arrays.key // n_labels
    node = node_of[arrays.key % n_labels]
    keep = node >= 0
    key = doc[keep] * n_nodes + node[keep]
    score = arrays.score[keep]
    if len(key) > 1 and not bool(np.all(key[1:] >= key[:-1])):
        order = np.argsort(key, kind="stable")
        key, score = key[order], score[order]
    if len(key):
        starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
        key, score = key[starts], np.maximum.reduceat(score, starts)
    gold_node = node_of[arrays.gold_key % n_labels]
    gold_keep = gold_node >= 0
    gold_key = np.unique(arrays.gold_key[gold_keep] // n_labels * n_nodes + gold_node[gold_keep])
    return ScoreArrays(arrays.n_docs, n_nodes, key, score, gold_key)


def level_arrays(
    arrays: ScoreArrays, ancestors: pl.DataFrame, level: str
) -> tuple[ScoreArrays, int]:
    """:func:`pool` to ``level`` of an ``code, level, ancestor`` table, its labels named by the
    nodes (two models' pooled labels are matched by name when their pairs are pooled); also
    returns the number of labels without a node at that level (left out there)."""
    at_level = ancestors.filter(pl.col("level") == level).select("code", "ancestor")
    mapped = pl.DataFrame({"code": list(arrays.labels)}, schema={"code": pl.String}).join(
        at_level, on="code", how="left", maintain_order="left"
    )["ancestor"]
    nodes = mapped.drop_nulls().unique().sort()
    node_index = {n: i for i, n in enumerate(nodes.to_list())}
    node_of = np.array([node_index.get(a, -1) for a in mapped.to_list()], dtype=np.int64)
    pooled = replace(pool(arrays, node_of, len(nodes)), labels=tuple(nodes.to_list()))
    return pooled, int((node_of < 0).sum())


def score_rows(
    gold: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    model: str,
    ks: Sequence[int] = DEFAULT_KS,
    ancestors: pl.DataFrame | None = None,
    levels: Sequence[str] = (),
    threshold: float | None = None,
) -> tuple[pl.DataFrame, dict]:
    """A model's tidy rows from its scores: ranking at the leaves and at each of ``levels``
    (max-pooled through ``ancestors``), calibration, and the tuned ``threshold`` when given;
    with the notes the report shows (unscored pairs, why a family is missing).

    A model without scores gets no ranking or calibration rows (only its threshold, if tuned).
    """
    rows: list[tuple[str, str, str, str, float]] = []
    notes: dict = {"model": model, "scored_pairs": scores.height}
    if scores.height:
        arrays = encode(gold, scores)
        notes.update(label_space_pairs=arrays.pairs, unscored_pairs=arrays.unscored)
        if arrays.unscored:
            log.info(
                "%s: %d of %d (document, code) pairs of the label space are unscored; they rank "
                "below every scored pair, so AUC is a bound",
                model,
                arrays.unscored,
                arrays.pairs,
            )
        by_level = [(LEAF, arrays)]
        for level in levels:
            pooled, left_out = level_arrays(arrays, ancestors, level)
            if left_out:
                notes.setdefault("codes_without_node", {})[level] = left_out
            by_level.append((level, pooled))
        for level, level_scores in by_level:
            for (average, metric), value in point_values(level_scores, ks).items():
                rows.append(("ranking", level, average, metric, value))
        calibration = calibration_values(arrays)
        if calibration is None:
            notes["calibration"] = "scores outside [0, 1]: no calibration rows"
        else:
            rows += [("calibration", LEAF, "micro", m, v) for m, v in calibration.items()]
    else:
        notes["ranking"] = "hard predictions (no scores): no ranking or calibration rows"
    if threshold is not None:
        rows.append(("selection", LEAF, "global", "threshold", threshold))
    tidy = pl.DataFrame(
        [(model, *row) for row in rows],
        schema=TIDY_SCHEMA,
        orient="row",
    )
    return sort_tidy(tidy, tuple(levels), [model]), notes
