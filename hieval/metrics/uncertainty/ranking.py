"""Bootstrap replicates of the ranking and calibration rows (:mod:`hieval.metrics.ranking`).

As for the count metrics (:mod:`hieval.metrics.uncertainty`), a replicate is the test set with
a weight per document, and every row here is a function of per-document sums:

- ``precision@K``, ``recall@K``, ``r_precision`` and ``map`` (``mean``) are means over
  documents (every document, or those with a gold code) of a per-document value, so a
  replicate is Σ w·value / Σ w·[counted];
- ``brier`` is Σ (score − truth)² over the pairs of the label space / the pairs: per document,
  its squared errors and its number of pairs (the label space's size);
- ``ece`` is Σ over bins |Σ truth − Σ score| / pairs: per document and bin, its score and truth
  sums, the bins' sums over documents weighted before the absolute value.

Every quantity is linear in the weights, so a model whose documents were swapped with another
model's (the randomization test) is the sum of two weighted tables, as for the count metrics.

What is held fixed: the label space (the test set's gold codes and the model's scored codes).
A replicate that drops every document holding a code keeps the code in the label space, so
with integer weights a replicate is the test set with each document repeated that many times
*over the test set's label space* (tested against exactly that).

ROC-AUC (micro and macro, at the leaves and each level) is no per-document sum: it counts
(positive, negative) pairs across documents. Its replicates are weighted Mann-Whitney
statistics over the scores sorted once (:mod:`hieval.metrics.uncertainty.auc`), with the same
weights and swaps; a swap pools the two models' sorted pairs (:func:`auc_pair_plans`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from scipy import sparse

from hieval.metrics.arithmetic import divide, exact_weighted_sums
from hieval.metrics.document_measures import ALL_DOCUMENTS, GOLD_DOCUMENTS, RankedDocuments
from hieval.metrics.propensity import TrainPropensities
from hieval.metrics.ranking import (
    DEFAULT_KS,
    ECE_BINS,
    ScoreArrays,
    calibration_formula,
    calibration_sums,
    encode,
    level_arrays,
    ranked_documents,
    with_gains,
)
from hieval.metrics.registry import DOCUMENT_MEANS, LEAF, at_ks, lookup
from hieval.metrics.uncertainty.auc import (
    AUC_MAX_SCORED_PAIRS,
    MACRO,
    MICRO,
    AucPairs,
    AucPlan,
    auc_pairs,
    auc_plan,
    auc_replicates,
)
from hieval.metrics.uncertainty.auc_blocks import AucAccumulator

#: The per-document denominators of the ``mean`` metrics (columns of :class:`RankingUnits`).
DOCUMENT_SETS = (ALL_DOCUMENTS, GOLD_DOCUMENTS)

log = logging.getLogger(__name__)

Key = tuple[str, str, str, str]


@dataclass(frozen=True)
class RankingUnits:
    """One model's per-document table of additive quantities (documents × ``names``): per
    level the numerators of the per-document means and their two denominators (``docs``: 1,
    ``gold_docs``: the document has a gold code), and for calibration the squared errors, the
    pairs and the per-bin score and truth sums. ``keys`` are the rows it can replicate.

    AUC is not additive per document: ``auc`` holds per level the model's scored pairs
    (:class:`~hieval.metrics.uncertainty.auc.AucPairs`, to pool with another model's) and
    ``auc_plans`` the same pairs sorted once for the bootstrap. A level above
    :data:`~hieval.metrics.uncertainty.auc.AUC_MAX_SCORED_PAIRS` scored pairs has neither:
    ``auc_bootstrap`` holds its bootstrap replicates instead, computed once for every
    replicate (``micro``, ``macro``, and ``bound``: micro's error bound,
    :mod:`hieval.metrics.uncertainty.auc_blocks`), and no randomization test (comparisons
    take the paired bootstrap test: :mod:`hieval.metrics.uncertainty.bootstrap_test`)."""

    columns: np.ndarray
    names: dict[str, int]
    keys: tuple[Key, ...]
    auc: dict[str, AucPairs] = field(default_factory=dict)
    auc_plans: dict[str, AucPlan] = field(default_factory=dict)
    auc_bootstrap: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def column(self, name: str) -> np.ndarray:
        return self.columns[:, self.names[name]]


#: The prefix of a ``mean`` metric's per-document best values (the denominator of a metric
#: with a declared ``best``: Σ statistic / Σ best).
BEST = "best|"


def _document_values(arrays: ScoreArrays, ks: Sequence[int]) -> dict[str, np.ndarray]:
    """Per document: each ``mean`` metric's statistic (0 where the document does not count,
    its registry declaration's, as :func:`hieval.metrics.ranking.point_values` averages it)
    and the denominators, one column per document set the declarations average over and, for
    a metric with a declared ``best``, its best values (``best|psp@5``), zero where the
    document does not count. A statistic the arrays cannot give (no gains) has no column."""
    return document_columns(ranked_documents(arrays), ks)


def document_columns(docs: RankedDocuments, ks: Sequence[int]) -> dict[str, np.ndarray]:
    """:func:`_document_values` from the gold pairs' ranks themselves (a dense matrix's come
    from :mod:`hieval.metrics.blocked`, not from score arrays)."""
    out = {over: docs.counted(over).astype(np.float64) for over in DOCUMENT_SETS}
    for metric in DOCUMENT_MEANS:
        mean = metric.per_document
        for name, k in at_ks(metric.metric, ks):
            values = mean.statistic(docs, k)
            if values is None:
                continue
            out[name] = values
            if mean.best is not None:
                out[BEST + name] = mean.best(docs, k) * out[mean.over]
    return out


def _denominator(metric: str) -> str:
    """The per-document column a ``mean`` metric's tidy name (``precision@5``) divides by, as
    its registry entry declares it: the document set it averages over, or its best values."""
    mean = lookup("ranking", "mean", metric).per_document
    return mean.over if mean.best is None else BEST + metric


def ranking_units(  # noqa: PLR0913 (score_rows's keyword-only options and the replicates' documents)
    gold: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    doc_ids: pl.Series,
    ks: Sequence[int] = DEFAULT_KS,
    ancestors: pl.DataFrame | None = None,
    levels: Sequence[str] = (),
    bins: int = ECE_BINS,
    model: str = "model",
    propensities: TrainPropensities | None = None,
    weights: np.ndarray | Callable[[], np.ndarray | None] | None = None,
) -> RankingUnits:
    """A model's :class:`RankingUnits` from the normalised gold and its score table, for the
    rows :func:`hieval.metrics.ranking.score_rows` gives it, with its documents
    aligned to ``doc_ids`` (the gold's, sorted: the bootstrap's order).

    With ``propensities`` (a training gold's) the propensity-scored rows are replicated too.
    ROC-AUC rows are replicated from a plan of the sorted pairs where a level has at most
    :data:`AUC_MAX_SCORED_PAIRS` scored pairs; above it from the pairs in chunks
    (:func:`chunked_auc_replicates`), given the bootstrap's ``weights`` (replicates ×
    documents, ``doc_ids``' order, or a function drawing them on first use: most models never
    need them; without them those rows get no interval and the log says so, ``model`` naming
    it)."""
    arrays = with_gains(encode(gold, scores), propensities)
    own = gold["doc_id"].unique().sort()
    if not own.equals(doc_ids, check_names=False):
        raise ValueError("the score table's gold documents differ from the bootstrap's")
    names: dict[str, int] = {}
    columns: list[np.ndarray] = []
    keys: list[Key] = []
    auc: dict[str, AucPairs] = {}
    boot: dict[str, dict[str, np.ndarray]] = {}

    def add(name: str, values: np.ndarray) -> None:
        names[name] = len(columns)
        columns.append(np.asarray(values, dtype=np.float64))

    by_level = [(LEAF, arrays)] + [
        (level, level_arrays(arrays, ancestors, level)[0]) for level in levels
    ]
    for level, level_scores in by_level:
        if len(level_scores.key) <= AUC_MAX_SCORED_PAIRS:
            auc[level] = auc_pairs(level_scores)
            defined = auc[level].defined()
            keys += [("ranking", level, avg, "auc") for avg in (MICRO, MACRO) if defined[avg]]
        elif (drawn := drawn_weights(weights)) is not None:
            pairs = auc_pairs(level_scores)
            boot[level] = chunked_auc_replicates(pairs, drawn, model=model, level=level)
            defined = pairs.defined()
            keys += [("ranking", level, avg, "auc") for avg in (MICRO, MACRO) if defined[avg]]
        else:
            log.warning(
                "%s: %s scored pairs at level %s, above %s, and no bootstrap weights: its "
                "ROC-AUC rows get no interval",
                model,
                f"{len(level_scores.key):,}",
                level,
                f"{AUC_MAX_SCORED_PAIRS:,}",
            )
        values = _document_values(level_scores, ks)
        for name, column in values.items():
            add(f"{level}|{name}", column)
        for name in values:
            metric = name not in DOCUMENT_SETS and not name.startswith(BEST)
            if metric and values[_denominator(name)].any():
                keys.append(("ranking", level, "mean", name))
    calibration = calibration_sums(arrays, bins)
    if calibration is not None:
        for name, column in calibration.items():
            add(f"calibration|{name}", column)
        averages = ("micro", "scored") if len(arrays.key) else ("micro",)
        keys += [("calibration", LEAF, avg, m) for avg in averages for m in ("brier", "ece")]
    n_docs = doc_ids.len()
    matrix = np.column_stack(columns) if columns else np.zeros((n_docs, 0))
    plans = {level: auc_plan([pairs]) for level, pairs in auc.items()}
    return RankingUnits(matrix, names, tuple(keys), auc, plans, boot)


def drawn_weights(
    weights: np.ndarray | Callable[[], np.ndarray | None] | None,
) -> np.ndarray | None:
    """The bootstrap's weights, drawn now if given as a function."""
    return weights() if callable(weights) else weights


def chunked_auc_replicates(
    pairs: AucPairs, weights: np.ndarray, *, model: str, level: str
) -> dict[str, np.ndarray]:
    """The bootstrap's AUC replicates of one level's scored pairs above the plan's cap, by
    :class:`~hieval.metrics.uncertainty.auc_blocks.AucAccumulator` (macro exact, micro
    within the bound it returns, which the log reports)."""
    w = np.asarray(weights, dtype=np.float64)
    positive = pairs.positive
    accumulator = AucAccumulator(
        weights=w, n_docs=pairs.n_docs, total=pairs.n_labels,
        full_of=np.arange(pairs.n_labels), gold_doc=pairs.gold_doc, gold_label=pairs.gold_label,
        pos_doc=pairs.doc[positive], pos_col=pairs.label[positive],
        pos_score=pairs.score[positive],
    )  # fmt: skip
    negative = ~positive
    step = 1 << 22
    doc, label, score = pairs.doc[negative], pairs.label[negative], pairs.score[negative]
    for first in range(0, len(doc), step):
        chunk = slice(first, first + step)
        accumulator.add(doc[chunk], label[chunk], score[chunk])
    scored = sparse.csr_matrix(
        (np.ones(len(pairs.doc)), (pairs.label, pairs.doc)), shape=(pairs.n_labels, pairs.n_docs)
    )
    out = accumulator.finish((scored @ np.ascontiguousarray(w.T)).T)
    log.info(
        "%s: micro ROC-AUC replicates at level %s within %.2g of the exact values (binned)",
        model, level, float(np.nanmax(out.bound, initial=0.0)),
    )  # fmt: skip
    return {MICRO: out.micro, MACRO: out.macro, "bound": out.bound}


def auc_pair_plans(a: RankingUnits, b: RankingUnits) -> dict[str, AucPlan]:
    """Per level both models' pairs sorted together once (a then b), for the randomization
    test's swapped models: :func:`ranking_replicates` with components ``(a, 1 − s), (b, s)``."""
    return {level: auc_plan([a.auc[level], b.auc[level]]) for level in a.auc if level in b.auc}


#: What a replicate row is where it has nothing to average over (its denominator is 0: no
#: document, item, reached node, pair or code of its slice among the weighted documents):
#: the point estimate's zero-division convention, which the randomization test keeps (its
#: permutations hold every document, so they compare like with like) ...
CONVENTION = 0.0
#: ... or undefined, which the bootstrap uses: a replicate that drew nothing of a row says
#: nothing about it, so it is left out of the row's interval (``replicates`` counts the rest).
UNDEFINED = float("nan")


def replicate_mean(total: np.ndarray, count: np.ndarray, *, empty: float) -> np.ndarray:
    """total / count per replicate, ``empty`` where count is 0 (:data:`CONVENTION` or
    :data:`UNDEFINED`)."""
    return divide(total, count, zero_division=empty)


def ranking_replicates(
    components: list[tuple[RankingUnits, np.ndarray]],
    keys: Sequence[Key],
    *,
    bins: int = ECE_BINS,
    auc_plans: dict[str, AucPlan] | None = None,
    empty: float = CONVENTION,
    exact: bool = True,
    first: int | None = None,
) -> dict[Key, np.ndarray]:
    """The ``keys`` rows of the weighted data set Σ_c W_c · (documents of model c), one value
    per row of the weights (as :func:`hieval.metrics.uncertainty.replicates.replicate_values`): one
    component is a bootstrap replicate, two a swapped pair of models. ``auc_plans`` are the
    components' pairs sorted together (:func:`auc_pair_plans`); without them a single
    component uses its own and several are sorted together here, per call. ``empty`` is a
    mean's value where no document counts (:func:`replicate_mean`); ROC-AUC is NaN wherever it
    has no positive or no negative pair. ``exact``: sums correctly rounded, as the reported
    means are, so the all-ones replicate is the value bit for bit; the randomization test's
    permutations (which compare two models) sum in numpy's order instead. ``first``: the
    index of the weights' first row among the bootstrap's replicates, where a level's AUC
    replicates were computed beforehand (``auc_bootstrap``: above the plan's cap)."""
    names = components[0][0].names
    if exact:
        stacked = (
            (components[0][1], components[0][0].columns)
            if len(components) == 1
            else (
                np.hstack([w for _, w in components]),
                np.vstack([u.columns for u, _ in components]),
            )
        )
        sums = exact_weighted_sums(*stacked, remember=len(components) == 1)
    else:
        sums = sum(w @ u.columns for u, w in components)
    col = {name: sums[:, i] for name, i in names.items()}
    out: dict[Key, np.ndarray] = {}
    auc: dict[str, dict[str, np.ndarray]] = {}
    calibration = None
    for key in keys:
        family, level, average, metric = key
        if metric == "auc" and level in components[0][0].auc_bootstrap:
            if len(components) != 1 or first is None:
                raise ValueError(f"no swapped AUC replicates above the cap ({level})")
            rows = components[0][0].auc_bootstrap[level][average]
            out[key] = rows[first : first + len(components[0][1])]
        elif metric == "auc":
            if level not in auc:
                if auc_plans is not None:
                    plan = auc_plans[level]
                elif len(components) == 1:
                    plan = components[0][0].auc_plans[level]
                else:
                    plan = auc_plan([u.auc[level] for u, _ in components])
                auc[level] = auc_replicates(plan, [w for _, w in components], exact=exact)
            out[key] = auc[level][average]
        elif family == "ranking":
            out[key] = replicate_mean(
                col[f"{level}|{metric}"], col[f"{level}|{_denominator(metric)}"], empty=empty
            )
        elif family == "calibration" and metric in ("brier", "ece"):
            if calibration is None:
                prefix = "calibration|"
                sums = {k[len(prefix) :]: v for k, v in col.items() if k.startswith(prefix)}
                calibration = calibration_formula(sums, bins, empty=empty)
            out[key] = calibration[average, metric]
        else:
            raise KeyError(f"no replicate formula for {key}")
    return out
