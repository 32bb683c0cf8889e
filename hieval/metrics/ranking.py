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
- ``brier`` / ``ece`` ``scored``: the same over the scored pairs only (a truncated score file's
  unscored zeros, mostly true negatives, would otherwise make any model look calibrated).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from hieval.metrics.arithmetic import divide, exact_sum, exact_weighted_sums
from hieval.metrics.document_measures import DocumentRanks, RankedDocuments
from hieval.metrics.propensity import TrainPropensities
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
    #: Per label, its inverse propensity from a training gold (the propensity-scored metrics'
    #: gains), or None; leaf labels only (a pooled level has none).
    gain: np.ndarray | None = None

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
            .join(doc_index, on="doc_id", how="inner", maintain_order="none")  # keyed below
            .join(code_index, on="code", how="inner", maintain_order="none")
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


def mann_whitney(doubled, scored_pos, scored_neg, positives, negatives):
    """ROC-AUC from weighted pair sums: the one definition of the reported value (weights all
    1) and of every bootstrap and randomization replicate
    (:mod:`hieval.metrics.uncertainty.auc`). Arguments broadcast (numpy arrays or numbers):

    - ``doubled``: Σ over scored positives i of w_i (2 · weighted scored negatives below i +
      weighted scored negatives tied with i);
    - ``scored_pos``, ``scored_neg``: the scored positives' and negatives' weights;
    - ``positives``, ``negatives``: every positive's and negative's weight in the label space.

    The unscored pairs tie below every scored pair: an unscored negative counts 2 under every
    scored positive, 1 under every unscored positive. With integer weights every sum is an
    integer, held exactly below 2**53, and only the final division rounds: the value does not
    depend on the order the pairs were summed in. NaN without positive or negative weight."""
    unscored_pos, unscored_neg = positives - scored_pos, negatives - scored_neg
    total = doubled + 2.0 * scored_pos * unscored_neg + unscored_pos * unscored_neg
    return divide(total, 2.0 * positives * negatives, zero_division=np.nan)


def with_gains(arrays: ScoreArrays, propensities: TrainPropensities | None) -> ScoreArrays:
    """``arrays`` with its labels' inverse propensities as gains (unchanged without)."""
    return arrays if propensities is None else replace(arrays, gain=propensities.of(arrays.labels))


def macro_mean(per_label: np.ndarray, *, exact: bool = True) -> np.ndarray:
    """Per row (replicate), the correctly rounded mean of the defined (not NaN) label values:
    macro AUC, reported (one row, weights all 1) and replicated. ``exact=False`` sums in
    numpy's order (the randomization test's permutations, which compare two models)."""
    per_label = np.atleast_2d(per_label)
    defined = ~np.isnan(per_label)
    values = np.where(defined, per_label, 0.0)
    total = exact_sum(values) if exact else values.sum(1)
    return divide(total, defined.sum(1), zero_division=np.nan)


def _doubled_scored(negatives: np.ndarray, positives: np.ndarray) -> int:
    """``doubled`` of :func:`mann_whitney` with every weight 1: Σ over ``positives`` of 2 ·
    (sorted ``negatives`` below) + (tied), by binary search (integers: exact)."""
    left = np.searchsorted(negatives, positives, side="left")
    right = np.searchsorted(negatives, positives, side="right")
    return int(left.sum(dtype=np.int64) + right.sum(dtype=np.int64))


def _truth(arrays: ScoreArrays) -> np.ndarray:
    """Per scored pair: whether it is a gold pair."""
    found, index = arrays.gold_found()
    truth = np.zeros(len(arrays.key), dtype=bool)
    truth[index[found]] = True
    return truth


def micro_auc(arrays: ScoreArrays) -> float | None:
    """ROC-AUC over every pair of the label space (None without positives or negatives):
    :func:`mann_whitney` with every weight 1."""
    positives = len(arrays.gold_key)
    negatives = arrays.pairs - positives
    if positives == 0 or negatives == 0:
        return None
    truth = _truth(arrays)
    doubled = _doubled_scored(np.sort(arrays.score[~truth]), arrays.score[truth])
    scored_pos = int(truth.sum())
    value = mann_whitney(
        float(doubled), float(scored_pos), float(len(truth) - scored_pos),
        float(positives), float(negatives),
    )  # fmt: skip
    return float(value)


def _label_order(arrays: ScoreArrays) -> np.ndarray:
    """The scored pairs' order grouped by label (label-major, pair order within)."""
    label = arrays.key % arrays.n_labels
    small = np.uint16 if arrays.n_labels <= np.iinfo(np.uint16).max else np.int64
    return np.argsort(label.astype(small), kind="stable")  # a radix sort for uint16


def by_label(arrays: ScoreArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scores grouped by label (label-major, any order within), and each label's run."""
    counts = np.bincount(arrays.key % arrays.n_labels, minlength=arrays.n_labels)
    starts = np.concatenate([[0], np.cumsum(counts)])
    return arrays.score[_label_order(arrays)], starts, counts


def per_label_auc(arrays: ScoreArrays) -> np.ndarray:
    """Each label's ROC-AUC over the documents (NaN where it has no positive or no negative):
    :func:`mann_whitney` with every weight 1, per label."""
    n_docs = arrays.n_docs
    gold_label = arrays.gold_key % arrays.n_labels
    support = np.bincount(gold_label, minlength=arrays.n_labels)
    truth = _truth(arrays)
    label = arrays.key % arrays.n_labels
    order = _label_order(arrays)
    grouped, grouped_truth = arrays.score[order], truth[order]
    starts = np.concatenate([[0], np.cumsum(np.bincount(label, minlength=arrays.n_labels))])
    scored_pos = np.bincount(label[truth], minlength=arrays.n_labels)
    auc = np.full(arrays.n_labels, np.nan)
    for c in np.flatnonzero((support > 0) & (support < n_docs)):
        column = grouped[starts[c] : starts[c + 1]]
        positive = grouped_truth[starts[c] : starts[c + 1]]
        doubled = _doubled_scored(np.sort(column[~positive]), column[positive])
        auc[c] = mann_whitney(
            float(doubled), float(scored_pos[c]), float(len(column) - scored_pos[c]),
            float(support[c]), float(n_docs - support[c]),
        )  # fmt: skip
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


def ranked_documents(arrays: ScoreArrays) -> RankedDocuments:
    """The gold pairs' ranks (:func:`document_ranks`) with their codes' gains, if any."""
    gain = None if arrays.gain is None else arrays.gain[arrays.gold_key % arrays.n_labels]
    return RankedDocuments(document_ranks(arrays), arrays.n_docs, gain)


def document_mean(metric, docs: RankedDocuments, k: int | None) -> float | None:
    """A ``mean`` metric's reported value: the exact mean of its statistic over the documents
    it counts, or with a declared ``best`` Σ statistic / Σ best over them; None where it is
    undefined (no counted document, no gains, a best of 0)."""
    mean = metric.per_document
    counted = docs.counted(mean.over)
    per_doc = mean.statistic(docs, k)
    if per_doc is None or not counted.any():
        return None
    if mean.best is None:
        return exact_mean(per_doc[counted])
    best = math.fsum(mean.best(docs, k)[counted].tolist())
    return math.fsum(per_doc[counted].tolist()) / best if best > 0 else None


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
    if not np.isnan(per_label).all():
        values["macro", "auc"] = float(macro_mean(per_label)[0])
    if arrays.n_docs == 0:
        return values
    return values | document_means(ranked_documents(arrays), ks)


def document_means(docs: RankedDocuments, ks: Sequence[int]) -> dict[tuple[str, str], float]:
    """Every ``mean`` ranking row (P@K, R@K, R-precision, MAP, nDCG@K, ...) by (average,
    metric) from ranked documents, each :func:`document_mean` of its registry declaration
    (:data:`~hieval.metrics.registry.DOCUMENT_MEANS`); a metric without a counted document (or
    without the gains it needs) is left out. Shared by the long path and the dense blocks."""
    values: dict[tuple[str, str], float] = {}
    for metric in DOCUMENT_MEANS:
        for name, k in at_ks(metric.metric, ks):
            value = document_mean(metric, docs, k)
            if value is not None:
                values[metric.average, name] = value
    return values


def calibration_sums(arrays: ScoreArrays, bins: int = ECE_BINS) -> dict[str, np.ndarray] | None:
    """Per document, what Brier and ECE sum (None when a score lies outside [0, 1]: they are
    then no probabilities): ``brier`` its squared errors over the label space (unscored pairs
    score 0), ``pairs`` its pairs (the label space's size), ``score|b`` and ``true|b`` its
    scores and gold pairs in bin b. Every calibration value, reported or replicated, is
    :func:`calibration_formula` of these sums weighted by document."""
    score = arrays.score
    if arrays.pairs == 0 or (len(score) and (score.min() < 0 or score.max() > 1)):
        return None
    n_docs = arrays.n_docs
    found, _ = arrays.gold_found()
    truth = _truth(arrays)
    doc = arrays.key // arrays.n_labels
    missed = np.bincount(arrays.gold_key[~found] // arrays.n_labels, minlength=n_docs)
    error = score - truth
    scored_brier = np.bincount(doc, weights=error * error, minlength=n_docs)
    out = {
        "brier": scored_brier + missed,
        "pairs": np.full(n_docs, float(arrays.n_labels)),
    }
    bin_of = np.minimum((score * bins).astype(np.int64), bins - 1)
    cell = doc * bins + bin_of
    score_sum = np.bincount(cell, weights=score, minlength=n_docs * bins).reshape(n_docs, bins)
    scored_true = np.bincount(cell[truth], minlength=n_docs * bins).reshape(n_docs, bins)
    scored_true = scored_true.astype(np.float64)
    true_sum = scored_true.copy()
    true_sum[:, 0] += missed  # gold pairs the model did not score: score 0, truth 1
    for b in range(bins):
        out[f"score|{b}"] = score_sum[:, b]
        out[f"true|{b}"] = true_sum[:, b]
    out["scored|brier"] = scored_brier
    out["scored|pairs"] = np.bincount(doc, minlength=n_docs).astype(np.float64)
    for b in range(bins):
        out[f"scored|true|{b}"] = scored_true[:, b]
    return out


def calibration_formula(
    col: dict[str, np.ndarray], bins: int = ECE_BINS, *, empty: float = 0.0
) -> dict[tuple[str, str], np.ndarray]:
    """Brier score and ECE per row of weighted sums of :func:`calibration_sums`' columns
    (``col``: name -> one sum per replicate, correctly rounded): Σ squared errors / pairs, and
    Σ over bins |Σ truth − Σ score| / pairs (the bins' sums over documents weighted before the
    absolute value); ``empty`` where no pair is weighted. Keyed by (average, metric): ``micro``
    over the label space, ``scored`` over the scored pairs only (the same bins' score sums, the
    gold pairs among the scored ones, the scored pairs' count)."""
    out = {}
    for average, prefix in (("micro", ""), ("scored", "scored|")):
        gaps = np.column_stack(
            [np.abs(col[f"{prefix}true|{b}"] - col[f"score|{b}"]) for b in range(bins)]
        )
        pairs = col[f"{prefix}pairs"]
        out[average, "brier"] = divide(col[f"{prefix}brier"], pairs, zero_division=empty)
        out[average, "ece"] = divide(exact_sum(gaps), pairs, zero_division=empty)
    return out


def calibration_values(
    arrays: ScoreArrays, bins: int = ECE_BINS, *, average: str = "micro"
) -> dict[str, float] | None:
    """Brier score and ECE by metric name, over the label space (``average="micro"``: unscored
    pairs score 0) or over the scored pairs (``"scored"``: None without one), or None when a
    score lies outside [0, 1]: :func:`calibration_formula` with every document weighing 1."""
    sums = calibration_sums(arrays, bins)
    if sums is None or (average == "scored" and len(arrays.key) == 0):
        return None
    names = list(sums)
    totals = exact_weighted_sums(np.ones((1, arrays.n_docs)), np.column_stack(list(sums.values())))
    values = calibration_formula(dict(zip(names, totals.T, strict=True)), bins)
    return {metric: float(value[0]) for (avg, metric), value in values.items() if avg == average}


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
    propensities: TrainPropensities | None = None,
) -> tuple[pl.DataFrame, dict]:
    """A model's tidy rows from its scores: ranking at the leaves and at each of ``levels``
    (max-pooled through ``ancestors``), calibration, and the tuned ``threshold`` when given;
    with the notes the report shows (unscored pairs, why a family is missing). The
    propensity-scored rows (``psp@K``, ``psndcg@K``, leaves only) need ``propensities``
    (a training gold's, :mod:`hieval.metrics.propensity`).

    A model without scores gets no ranking or calibration rows (only its threshold, if tuned).
    """
    rows: list[tuple[str, str, str, str, float]] = []
    notes: dict = {"model": model, "scored_pairs": scores.height}
    if scores.height:
        arrays = with_gains(encode(gold, scores), propensities)
        if propensities is None:
            notes["propensity"] = "no training gold (--train-gold): no psp@K or psndcg@K rows"
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
            scored = calibration_values(arrays, average="scored") or {}
            rows += [("calibration", LEAF, "scored", m, v) for m, v in scored.items()]
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
