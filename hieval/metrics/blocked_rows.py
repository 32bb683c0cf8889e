"""A dense model's ranking and calibration rows read from its matrix by blocks of documents
(issue 36): :func:`hieval.metrics.ranking.score_rows`' rows and notes, to the last bit, without
the long scores table.

Why: the long path indexes every scored pair (157M at MIMIC-IV's size) by string joins and
sorts them per level. Here the matrix stays on disk (memory mapped, its sha256 checked), the
gold becomes integer pairs over its rows and columns, and :func:`hieval.metrics.blocked.
blocked_levels` ranks the gold pairs at the leaves and every max-pooled level in two reads.
Its counts are integers and its final arithmetic today's, so AUC and the document means are
today's bits. Calibration sums each document's squared errors and bin sums in the order
today's ``np.bincount`` adds them (the scored codes of a document in code order), then sums the
documents exactly, as :func:`hieval.metrics.ranking.calibration_values` does: today's bits too.

Documents are numbered here as the matrix's rows come (those with a row first, then the gold's
documents without one): every mean over documents is an exact sum, which no order changes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import polars as pl
from threadpoolctl import threadpool_limits

from hieval.engine.groups import default_threads
from hieval.inputs.dense_decisions import BLOCK_DOCS_VARIABLE, UNSCORED
from hieval.inputs.dense_scores import DenseScores, RowView
from hieval.metrics import blocked
from hieval.metrics.arithmetic import exact_weighted_sums
from hieval.metrics.blocked_calibration import block_sums
from hieval.metrics.document_measures import DocumentRanks, RankedDocuments
from hieval.metrics.ranking import ECE_BINS, calibration_formula
from hieval.metrics.registry import LEAF, TIDY_SCHEMA, sort_tidy
from hieval.metrics.uncertainty.auc import AUC_MAX_SCORED_PAIRS
from hieval.metrics.uncertainty.auc_blocks import AucAccumulator
from hieval.metrics.uncertainty.ranking import (
    BEST,
    DOCUMENT_SETS,
    RankingUnits,
    document_columns,
    drawn_weights,
)
from hieval.metrics.uncertainty.ranking import _denominator as denominator

log = logging.getLogger(__name__)


def block_docs() -> int:
    return int(os.environ.get(BLOCK_DOCS_VARIABLE, blocked.DEFAULT_BLOCK_DOCS))


class DenseModel:
    """A dense model over the gold: the matrix's kept rows in order (``view``), the gold pairs
    as (document, label) integers, the label space (``labels``: each label's code, the
    matrix's kept columns first, then the gold's other codes) and its code order."""

    def __init__(self, scores: DenseScores, gold: pl.DataFrame) -> None:
        matrix = scores.matrix()
        gold_docs = sorted(gold["doc_id"].unique().to_list())
        in_gold = set(gold_docs)
        rows = [i for i, d in enumerate(scores.docs) if d is not None and d in in_gold]
        rows.sort(key=lambda i: scores.docs[i])
        cols = [j for j, c in enumerate(scores.codes) if c is not None]
        self.unscored = 0  # the view's unscored cells (-inf: a long file scoring most pairs)
        if scores.unscored:  # a column unscored on every kept row is no label, as on the long
            # path, whose scores of documents outside the gold are dropped with their codes
            scored = _scored_cells(RowView(matrix, np.array(rows, dtype=np.int64), cols))
            cols = [j for j, n in zip(cols, scored, strict=True) if n]
            self.unscored = len(rows) * len(cols) - int(scored.sum())
        with_row = {scores.docs[i] for i in rows}
        docs = [scores.docs[i] for i in rows] + [d for d in gold_docs if d not in with_row]
        column_codes = [scores.codes[j] for j in cols]
        gold_pairs = gold.drop_nulls("code")
        others = sorted(set(gold_pairs["code"].to_list()) - set(column_codes))
        self.docs: list[str] = docs  # rows with a row in the matrix first, then the others
        self.labels: list[str] = column_codes + others
        self.extra_labels = len(others)
        self.n_docs = len(docs)
        self.code_order = np.argsort(np.argsort(np.array(self.labels, dtype=object)))
        all_cols = len(cols) == matrix.shape[1]
        self.view = RowView(matrix, np.array(rows, dtype=np.int64), None if all_cols else cols)
        doc_index = {d: i for i, d in enumerate(docs)}
        label_index = {c: j for j, c in enumerate(self.labels)}
        self.gold_rows = np.array([doc_index[d] for d in gold_pairs["doc_id"]], dtype=np.int64)
        self.gold_cols = np.array([label_index[c] for c in gold_pairs["code"]], dtype=np.int64)

    @property
    def pairs(self) -> int:
        return self.n_docs * len(self.labels)

    @property
    def scored(self) -> int:
        return self.view.size - self.unscored

    def node_of(self, ancestors: pl.DataFrame, level: str) -> tuple[np.ndarray, int]:
        """Each label's node at ``level`` (nodes numbered in name order, -1 for none), as
        :func:`hieval.metrics.ranking.level_arrays` places them, and how many have none."""
        at_level = ancestors.filter(pl.col("level") == level).select("code", "ancestor")
        mapped = pl.DataFrame({"code": self.labels}, schema={"code": pl.String}).join(
            at_level, on="code", how="left", maintain_order="left"
        )["ancestor"]
        nodes = mapped.drop_nulls().unique().sort()
        index = {n: i for i, n in enumerate(nodes.to_list())}
        node_of = np.array([index.get(a, -1) for a in mapped.to_list()], dtype=np.int64)
        return node_of, int((node_of < 0).sum())


def _scored_cells(view: RowView) -> np.ndarray:
    """Per column of ``view``, its cells that are not ``-inf``, a block of rows at a time."""
    size = block_docs()
    scored = np.zeros(view.shape[1], dtype=np.int64)
    for start in range(0, view.shape[0], size):
        scored += np.count_nonzero(view[start : start + size] != -np.inf, axis=0)
    return scored


def dense_score_rows(
    gold: pl.DataFrame,
    scores: DenseScores,
    *,
    model: str,
    ks: Sequence[int],
    ancestors: pl.DataFrame | None,
    levels: Sequence[str],
    threshold: float | None,
) -> tuple[pl.DataFrame, dict]:
    """:func:`hieval.metrics.ranking.score_rows` of a dense model without training gold (the
    propensity-scored rows need the long path)."""
    tidy, notes, _units = dense_rows_and_units(
        gold, scores, model=model, ks=ks, ancestors=ancestors, levels=levels,
        threshold=threshold,
    )  # fmt: skip
    return tidy, notes


def dense_rows_and_units(  # noqa: PLR0913 (dense_score_rows's options, the bootstrap's weights and threads)
    gold: pl.DataFrame,
    scores: DenseScores,
    *,
    model: str,
    ks: Sequence[int],
    ancestors: pl.DataFrame | None,
    levels: Sequence[str],
    threshold: float | None,
    weights: np.ndarray | Callable[[], np.ndarray | None] | None = None,
    threads: int | None = None,
) -> tuple[pl.DataFrame, dict, RankingUnits | None]:
    """:func:`dense_score_rows`, and with the bootstrap's ``weights`` (replicates ×
    documents, the gold's documents sorted, or a function drawing them) the model's
    :func:`dense_ranking_units` from the same reads of the matrix (None where every level is
    small enough for the exact AUC plan, or without ``weights``).

    Why: the bootstrap's units need the same document ranks and calibration sums, and their
    AUC replicates ride on the same second read as the point AUCs; computing them here,
    while the matrix is read for the rows, saves a first read (every row sorted) and a
    second one (every block pooled) per model (issue 36). ``threads``: at most that many
    (None: the cores this process may use) read and finish the replicates."""
    dense = DenseModel(scores, gold)
    notes: dict = {
        "model": model,
        "scored_pairs": dense.scored,
        "propensity": "no training gold (--train-gold): no psp@K or psndcg@K rows",
        "label_space_pairs": dense.pairs,
        "unscored_pairs": dense.pairs - dense.scored,
    }
    if dense.pairs - dense.scored:
        log.info(
            "%s: %d of %d (document, code) pairs of the label space are unscored; they rank "
            "below every scored pair, so AUC is a bound",
            model, dense.pairs - dense.scored, dense.pairs,
        )  # fmt: skip
    node_of = {}
    for level in levels:
        node_of[level], left_out = dense.node_of(ancestors, level)
        if left_out:
            notes.setdefault("codes_without_node", {})[level] = left_out
    size = block_docs()
    replicates = None
    if weights is not None and _above_cap(dense, node_of):
        replicates = _replicates(dense, weights)
    results = _levels(dense, node_of, size, second_read=replicates, threads=threads)
    rows: list[tuple[str, str, str, str, float]] = []
    for level in [LEAF, *levels]:
        aucs, ranks = results["leaf" if level == LEAF else level]
        values = {}
        if aucs.micro is not None:
            values["micro", "auc"] = aucs.micro
        if aucs.macro is not None:
            values["macro", "auc"] = aucs.macro
        if dense.n_docs:
            values |= blocked.document_values(ranks, dense.n_docs, ks)
        rows += [("ranking", level, average, metric, v) for (average, metric), v in values.items()]
    sums = calibration_sums(dense, block_docs=size)
    calibration = None if sums is None else _calibration_from_sums(dense, sums)
    if calibration is None:
        notes["calibration"] = "scores outside [0, 1]: no calibration rows"
    else:
        for average in ("micro", "scored"):  # the long path's row order
            rows += [
                ("calibration", LEAF, a, m, v) for (a, m), v in calibration.items() if a == average
            ]
    if threshold is not None:
        rows.append(("selection", LEAF, "global", "threshold", threshold))
    tidy = pl.DataFrame([(model, *row) for row in rows], schema=TIDY_SCHEMA, orient="row")
    units = None
    if replicates is not None:
        units = _units(
            dense, results, sums, replicates, ks=ks, levels=levels, model=model, threads=threads
        )
    return sort_tidy(tidy, tuple(levels), [model]), notes, units


def calibration_sums(
    dense: DenseModel, *, block_docs: int, bins: int = ECE_BINS
) -> dict[str, np.ndarray] | None:
    """:func:`hieval.metrics.ranking.calibration_sums` of a dense model, a block at a time:
    per document its squared errors (unscored pairs score 0, so a missed gold pair adds 1),
    its pairs and each bin's score sum and gold count; None when a score lies outside [0, 1].
    Each document's sums add its scored codes in code order, as today's ``np.bincount`` over
    the sorted keys does (:mod:`hieval.metrics.blocked_calibration`), so every per-document
    float is today's."""
    view, n_docs = dense.view, dense.n_docs
    scored_rows, width = view.shape
    if dense.pairs == 0:
        return None
    by_code = np.argsort(dense.code_order[:width], kind="stable")
    gold_rows, gold_cols = dense.gold_rows, dense.gold_cols
    inside = (gold_rows < scored_rows) & (gold_cols < width)
    missed = np.bincount(gold_rows[~inside], minlength=n_docs).astype(np.float64)
    rows, cols = gold_rows[inside], gold_cols[inside]
    column_at = np.empty(width, dtype=np.int64)
    column_at[by_code] = np.arange(width)  # each column's place in code order
    brier = np.zeros(n_docs)
    score_sum = np.zeros((n_docs, bins))
    true_sum = np.zeros((n_docs, bins))
    scored = np.zeros(n_docs)  # each document's scored cells
    inside_missed = np.zeros(n_docs)  # its unscored gold cells inside the matrix
    places = column_at[cols]  # each gold cell's place in code order
    order = np.lexsort((places, rows))
    rows, places = rows[order], places[order]
    bounds = np.searchsorted(rows, [*range(0, scored_rows, block_docs), scored_rows])
    for number, start in enumerate(range(0, scored_rows, block_docs)):
        block = np.ascontiguousarray(view[start : start + block_docs])
        a, b = bounds[number], bounds[number + 1]
        n = block.shape[0]
        inside_range = block_sums(
            block, by_code, rows[a:b] - start, places[a:b], bins, brier[start : start + n],
            score_sum[start : start + n], true_sum[start : start + n], scored[start : start + n],
            inside_missed[start : start + n],
        )  # fmt: skip
        if not inside_range:
            return None
    missed += inside_missed
    scored_true = true_sum.copy()
    true_sum[:, 0] += missed  # gold pairs the model did not score: score 0, truth 1
    out = {"brier": brier + missed, "pairs": np.full(n_docs, float(len(dense.labels)))}
    for b in range(bins):
        out[f"score|{b}"] = score_sum[:, b]
        out[f"true|{b}"] = true_sum[:, b]
    out["scored|brier"] = brier  # the scored cells alone
    out["scored|pairs"] = scored
    for b in range(bins):
        out[f"scored|true|{b}"] = scored_true[:, b]
    return out


def calibration_values(
    dense: DenseModel, *, block_docs: int, bins: int = ECE_BINS
) -> dict[tuple[str, str], float] | None:
    """Brier score and ECE by (average, metric) as
    :func:`hieval.metrics.ranking.calibration_values` gives them: over the label space
    (``micro``) and over the scored pairs (``scored``, left out without a scored pair)."""
    sums = calibration_sums(dense, block_docs=block_docs, bins=bins)
    return None if sums is None else _calibration_from_sums(dense, sums, bins=bins)


def _calibration_from_sums(
    dense: DenseModel, sums: dict[str, np.ndarray], *, bins: int = ECE_BINS
) -> dict[tuple[str, str], float]:
    """:func:`calibration_values` from the per-document sums of :func:`calibration_sums`."""
    names = list(sums)
    totals = exact_weighted_sums(np.ones((1, dense.n_docs)), np.column_stack(list(sums.values())))
    values = calibration_formula(dict(zip(names, totals.T, strict=True)), bins)
    averages = ("micro", "scored") if dense.scored else ("micro",)
    return {key: float(value[0]) for key, value in values.items() if key[0] in averages}


def dense_ranking_units(  # noqa: PLR0913 (ranking_units' options and the threads)
    gold: pl.DataFrame,
    scores: DenseScores,
    *,
    doc_ids: pl.Series,
    ks: Sequence[int],
    ancestors: pl.DataFrame | None,
    levels: Sequence[str],
    model: str,
    weights: np.ndarray | Callable[[], np.ndarray | None] | None = None,
    threads: int | None = None,
) -> RankingUnits | None:
    """:func:`hieval.metrics.uncertainty.ranking.ranking_units` of a dense model with a level
    above :data:`AUC_MAX_SCORED_PAIRS` scored pairs, from the blocks: the document columns
    from the blocked ranks and the calibration sums, in ``doc_ids``' order, and with the
    bootstrap's ``weights`` (replicates × documents, ``doc_ids``' order, or a function drawing
    them) every level's ROC-AUC
    replicates, read in the same pass (:mod:`hieval.metrics.uncertainty.auc_blocks`: macro
    exact, micro within a bound the log reports). None where every level is small enough for
    the exact AUC plan: then the long path (the same units, AUC included) is the one to take.
    (:func:`dense_rows_and_units` gives the same units from the score stage's reads.)"""
    dense = DenseModel(scores, gold)
    if not _sorted_docs(dense).equals(doc_ids, check_names=False):
        raise ValueError("the score table's gold documents differ from the bootstrap's")
    node_of = {level: dense.node_of(ancestors, level)[0] for level in levels}
    if not _above_cap(dense, node_of):
        return None
    size = block_docs()
    replicates = _replicates(dense, weights)  # drawn here, above the cap, and only here
    # the rows' AUCs were the score stage's: here the ranks, and the replicates' read
    results = _levels(dense, node_of, size, second_read=replicates, aucs=False, threads=threads)
    sums = calibration_sums(dense, block_docs=size)
    return _units(
        dense, results, sums, replicates, ks=ks, levels=levels, model=model, threads=threads
    )


def _sorted_docs(dense: DenseModel) -> pl.Series:
    """The model's documents (the gold's) sorted: the bootstrap's order."""
    return pl.Series(sorted(set(dense.docs)), dtype=pl.String)


def _above_cap(dense: DenseModel, node_of: dict[str, np.ndarray]) -> bool:
    """Whether a level has more than :data:`AUC_MAX_SCORED_PAIRS` scored pairs (else the
    long path's exact AUC plan gives the bootstrap's units)."""
    scored_rows, width = dense.view.shape
    scored = [dense.scored]
    for nodes in node_of.values():
        columns = nodes[:width]
        scored.append(scored_rows * len(np.unique(columns[columns >= 0])))
    return max(scored) > AUC_MAX_SCORED_PAIRS


def _place(dense: DenseModel) -> np.ndarray:
    """Each of the model's documents' place in the sorted order (the bootstrap's)."""
    return np.argsort(np.argsort(np.array(dense.docs, dtype=object)))


def _replicates(
    dense: DenseModel, weights: np.ndarray | Callable[[], np.ndarray | None] | None
) -> _AucReplicates | None:
    """The AUC replicates' accumulators for the blocked read, None without weights."""
    drawn = drawn_weights(weights)
    if drawn is None:
        return None
    return _AucReplicates(drawn[:, _place(dense)], dense.view.shape[0])


def _units(
    dense: DenseModel,
    results: dict,
    sums: dict[str, np.ndarray] | None,
    replicates: _AucReplicates | None,
    *,
    ks: Sequence[int],
    levels: Sequence[str],
    model: str,
    threads: int | None = None,
) -> RankingUnits:
    """The model's :class:`RankingUnits` from :func:`_levels`' ranks, the replicates
    accumulated in its second read and :func:`calibration_sums`, in the sorted documents'
    order."""
    place = _place(dense)
    names: dict[str, int] = {}
    columns: list[np.ndarray] = []
    keys: list = []
    boot: dict[str, dict[str, np.ndarray]] = {}
    if replicates is not None:
        boot = replicates.finish_levels(model, [LEAF, *levels], threads=threads)
    for level in [LEAF, *levels]:
        _aucs, ranks = results["leaf" if level == LEAF else level]
        if replicates is not None:
            defined = replicates.defined("leaf" if level == LEAF else level, dense.n_docs)
            keys += [("ranking", level, avg, "auc") for avg in ("micro", "macro") if defined[avg]]
        ranks = _in_order(ranks, place)
        values = document_columns(RankedDocuments(ranks, dense.n_docs), ks)
        for name, column in values.items():
            names[f"{level}|{name}"] = len(columns)
            columns.append(np.asarray(column, dtype=np.float64))
        for name in values:
            metric = name not in DOCUMENT_SETS and not name.startswith(BEST)
            if metric and values[denominator(name)].any():
                keys.append(("ranking", level, "mean", name))
    if replicates is None:
        log.warning("%s: ROC-AUC rows get no interval (no bootstrap weights were given)", model)
    if sums is not None:
        for name, column in sums.items():
            ordered = np.empty_like(column)
            ordered[place] = column
            names[f"calibration|{name}"] = len(columns)
            columns.append(ordered)
        averages = ("micro", "scored") if dense.scored else ("micro",)
        keys += [("calibration", LEAF, avg, m) for avg in averages for m in ("brier", "ece")]
    matrix = np.column_stack(columns) if columns else np.zeros((dense.n_docs, 0))
    return RankingUnits(matrix, names, tuple(keys), {}, {}, boot)


class _AucReplicates:
    """The bootstrap's AUC replicates of every level, accumulated in the blocked ranking's
    second read (:func:`hieval.metrics.blocked.blocked_levels`' ``second_read``), one
    :class:`~hieval.metrics.uncertainty.auc_blocks.AucAccumulator` a level; ``weights`` in
    the dense model's document order."""

    def __init__(self, weights: np.ndarray, scored_rows: int) -> None:
        self.weights = np.asarray(weights, dtype=np.float64)
        self.scored_rows = scored_rows
        self.states: dict = {}
        self.accumulators: dict[str, AucAccumulator] = {}

    def __call__(self, states: dict) -> Callable[..., None]:
        self.states = states
        for name, state in states.items():
            which = state.scored
            kept = state.values != UNSCORED  # a gold pair on an unscored cell is no scored one
            self.accumulators[name] = AucAccumulator(
                weights=self.weights, n_docs=self.weights.shape[1], total=state.total,
                full_of=state.full_of, gold_doc=state.rows, gold_label=state.full,
                pos_doc=state.rows[which][kept], pos_col=state.compact[which][kept],
                pos_score=state.values[kept],
            )  # fmt: skip
        return self.visit

    def visit(self, name: str, number: int, start: int, block: np.ndarray) -> None:
        state = self.states[name]
        a, b = state.bounds[number], state.bounds[number + 1]
        which = state.scored[a:b]
        kept = state.values[a:b] != UNSCORED
        self.accumulators[name].add_block(
            block, start, state.rows[which][kept] - start, state.compact[which][kept]
        )

    def defined(self, name: str, n_docs: int) -> dict[str, bool]:
        """Which AUC rows the point estimate has at a level (as its blocked AUCs decide):
        micro with a positive and a negative pair, macro with a label that has a positive and
        a negative document."""
        state = self.states[name]
        support = np.bincount(state.full, minlength=state.total)
        return {
            "micro": 0 < len(state.rows) < n_docs * state.total,
            "macro": bool(np.any((support > 0) & (support < n_docs))),
        }

    def finish_levels(
        self, model: str, levels: list[str], *, threads: int | None = None
    ) -> dict[str, dict[str, np.ndarray]]:
        """Every level's replicates (``micro``, ``macro``, ``bound``), by level name (the
        leaves as :data:`LEAF`). The levels are finished on two threads where ``threads``
        (None: the cores this process may use) allows: each is independent, its products run
        on one BLAS thread (set once here for both) and its sums are integers, exact in any
        order: the same bits."""
        names = ["leaf" if level == LEAF else level for level in levels]
        two = (threads or default_threads()) > 1 and len(names) > 1
        with (
            threadpool_limits(limits=1, user_api="blas"),
            ThreadPoolExecutor(2 if two else 1) as pool,
        ):
            done = list(pool.map(self.finish, names))
        for level, out in zip(levels, done, strict=True):
            log.info(
                "%s: micro ROC-AUC replicates at level %s within %.2g of the exact values "
                "(binned)", model, level, float(np.nanmax(out["bound"], initial=0.0)),
            )  # fmt: skip
        return dict(zip(levels, done, strict=True))

    def finish(self, name: str) -> dict[str, np.ndarray]:
        accumulator = self.accumulators.pop(name)
        rows = self.weights[:, : self.scored_rows].sum(axis=1)
        scored_weight = np.repeat(rows[:, None], accumulator.width, axis=1)
        out = accumulator.finish(scored_weight)
        return {"micro": out.micro, "macro": out.macro, "bound": out.bound}


def _in_order(ranks: DocumentRanks, place: np.ndarray) -> DocumentRanks:
    """The ranks with each document renumbered by ``place`` (sorted by it, stably: a
    document's pairs keep their code order)."""
    doc = place[ranks.doc]
    order = np.argsort(doc, kind="stable")
    return DocumentRanks(doc[order], ranks.position[order], ranks.precision[order])


def _levels(
    dense: DenseModel,
    node_of: dict[str, np.ndarray],
    size: int,
    *,
    second_read: Callable | None = None,
    aucs: bool = True,
    threads: int | None = None,
) -> dict:
    """:func:`hieval.metrics.blocked.blocked_levels` of the dense model: each level's AUCs and
    document ranks (the leaves' under ``"leaf"``), read in blocks of ``size`` documents."""
    return blocked.blocked_levels(
        dense.view, dense.gold_rows, dense.gold_cols, node_of=node_of,
        code_order=dense.code_order, n_docs=dense.n_docs, extra_labels=dense.extra_labels,
        block_docs=size, second_read=second_read, aucs=aucs, threads=threads,
    )  # fmt: skip
