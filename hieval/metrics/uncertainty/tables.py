"""Intervals and tests as tables: bootstrap percentile intervals, paired randomization
p-values (Holm-corrected), from the replicates of every tidy row; ROC-AUC above the exact
plan's cap gets the paired bootstrap test instead (:mod:`hieval.metrics.uncertainty.
bootstrap_test`), in the same Holm family."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import polars as pl
from threadpoolctl import threadpool_limits

from hieval.engine.groups import default_threads
from hieval.metrics.count_measures import COUNT_MEASURES
from hieval.metrics.registry import (
    DOCUMENTS,
    NODES,
    SUITE,
    TIDY_KEY,
    sort_tidy,
)
from hieval.metrics.uncertainty.auc import AUC_MAX_SCORED_PAIRS, MICRO
from hieval.metrics.uncertainty.bootstrap_test import BOOTSTRAP, RANDOMIZATION, bootstrap_p
from hieval.metrics.uncertainty.ranking import (
    UNDEFINED,
    RankingUnits,
    auc_pair_plans,
    ranking_replicates,
)
from hieval.metrics.uncertainty.replicates import (
    count_rows,
    pair_plan,
    replicate_values,
    swapped_values,
)
from hieval.metrics.uncertainty.settings import (
    Settings,
)
from hieval.metrics.uncertainty.units import Key, Layout, Units
from hieval.metrics.uncertainty.weights import (
    BLOCK_CELLS,
    BOOTSTRAP_BLOCK_CELLS,
    blocks,
    doc_keys,
    poisson_weights,
    swaps,
)

log = logging.getLogger(__name__)

INTERVAL_COLUMNS = (*TIDY_KEY, "value", "low", "high", "replicates", "method")
#: ``method`` of an interval: percentile, or the percentile interval centred on the point
#: estimate for the rows averaged over the labels the test set contains (:func:`label_set_rows`).
PERCENTILE, CENTRED = "percentile", "centred"
COMPARISON_COLUMNS = (
    "model_a", "model_b", "family", "level", "average", "metric",
    "difference", "low", "high", "p_value", "p_adjusted", "permutations", "test",
)  # fmt: skip
#: ``permutations``: the randomization test's (0: no test), null where a row got the bootstrap's;
#: ``test``: which test gave ``p_value`` (``randomization``, or ``bootstrap`` for ROC-AUC
#: above the exact plan's cap: :mod:`hieval.metrics.uncertainty.bootstrap_test`), null where
#: none did (``permutations: 0``).
#: |Δ*| ≥ |Δ| is counted with this relative slack: a swap that mirrors the observed difference
#: exactly must count, whatever the last bits of two sums in different orders.
_TIE = 1e-9


def _keys_of(tidy: pl.DataFrame) -> list[Key]:
    return list(tidy.select("family", "level", "average", "metric").iter_rows())


def _counts_only(units: Units, keys: list[Key], layout: Layout) -> bool:
    """Whether every row of ``keys`` needs the column sums alone (micro and count rows): no
    per-node work then (at 100× MIMIC that is most of it)."""
    probe = count_rows({name: np.zeros(1) for name in units.names}, layout)
    return all(k in probe for k in keys)


def block_values(
    units: Units, ranking: RankingUnits | None, keys: list[Key], w: np.ndarray, layout: Layout,
    *, first: int | None = None,
) -> np.ndarray:  # fmt: skip
    """One block of replicates × ``keys`` of one model, for the weights ``w``: the count, ICM
    and suite rows from its per-document tables, the ranking and calibration rows from its
    scores' (:mod:`hieval.metrics.uncertainty.ranking`); ``first`` is the index of ``w``'s
    first replicate (AUC replicates computed beforehand are looked up by it).

    A replicate in which a row has nothing to average over (it drew no document, item, node
    or pair the row counts) is NaN there, and left out of the row's interval
    (:func:`interval_bounds`), as ROC-AUC without a positive or a negative pair always was."""
    ranked = set(ranking.keys) if ranking is not None else set()
    own = [k for k in keys if k not in ranked]
    if _counts_only(units, own, layout):
        sums = w @ units.columns
        col = {name: sums[:, i] for name, i in units.names.items()}
        values = count_rows(col, layout, empty=UNDEFINED)
    else:
        values = replicate_values([(units, w)], layout, empty=UNDEFINED)
    if ranked:
        ranked_keys = [k for k in keys if k in ranked]
        values |= ranking_replicates([(ranking, w)], ranked_keys, empty=UNDEFINED, first=first)
    missing = [k for k in keys if k not in values]
    if missing:
        raise KeyError(f"no bootstrap formula for the tidy rows {missing[:5]}")
    return np.column_stack([values[k] for k in keys])


def _bootstrap_blocks(
    counts_only: bool, layout: Layout, settings: Settings
) -> Iterator[tuple[int, int]]:
    width = layout.doc_ids.len() if counts_only else layout.width
    cells = BLOCK_CELLS if counts_only else BOOTSTRAP_BLOCK_CELLS
    return blocks(settings.bootstrap, width, cells)


def bootstrap_matrix(
    units: Units, keys: list[Key], *, layout: Layout, weights_key: np.ndarray, settings: Settings,
    ranking: RankingUnits | None = None,
) -> np.ndarray:  # fmt: skip
    """Replicates × metrics (``keys``, the order of the model's tidy rows); ``ranking`` the
    model's scores' tables when ``keys`` hold ranking or calibration rows."""
    out = np.empty((settings.bootstrap, len(keys)))
    counts_only = _counts_only(units, keys, layout)
    for first, count in _bootstrap_blocks(counts_only, layout, settings):
        w = poisson_weights(weights_key, seed=settings.seed, first=first, count=count)
        out[first : first + count] = block_values(units, ranking, keys, w, layout, first=first)
    return out


def ranking_randomization_p(
    a: RankingUnits, b: RankingUnits, keys: list[Key], *, weights_key: np.ndarray,
    settings: Settings,
) -> np.ndarray:  # fmt: skip
    """:func:`randomization_p` for ranking and calibration rows (the same swaps): a swapped
    model takes a document's per-document values (for AUC: its scored pairs, over its own
    model's label space) from the other model where swapped. The two models' pairs are sorted
    together once for every permutation."""
    ones = np.ones((1, weights_key.size))
    plans = auc_pair_plans(a, b) if any(k[3] == "auc" for k in keys) else None
    observed_a, observed_b = (ranking_replicates([(u, ones)], keys) for u in (a, b))
    observed = np.array([abs(observed_a[k][0] - observed_b[k][0]) for k in keys])
    slack = _TIE * np.maximum(1.0, observed)
    hits = np.zeros(len(keys), dtype=np.int64)
    for first, count in blocks(settings.permutations, weights_key.size):
        s = swaps(weights_key, seed=settings.seed, first=first, count=count)
        star_a = ranking_replicates([(a, 1.0 - s), (b, s)], keys, auc_plans=plans, exact=False)
        star_b = ranking_replicates([(a, s), (b, 1.0 - s)], keys, auc_plans=plans, exact=False)
        delta = np.column_stack([np.abs(star_a[k] - star_b[k]) for k in keys])
        hits += (delta >= observed - slack).sum(0)
    return (1 + hits) / (1 + settings.permutations)


def _bounds(values: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """The percentile bounds per column over its defined replicates (NaN: none is)."""
    tail = (1 - confidence) / 2
    if not np.isnan(values).any():
        low, high = np.quantile(values, [tail, 1 - tail], axis=0)
        return low, high
    with warnings.catch_warnings():  # an all-NaN column is NaN, and becomes null in the table
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanquantile(values, [tail, 1 - tail], axis=0)
    return low, high


def _median(values: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(values, axis=0)


def label_set_rows(keys: list[Key], label_set: str) -> np.ndarray:
    """Which rows average over the labels the test set contains: macro P/R/F1 of every count
    family, macro ROC-AUC (the mean over the labels with a positive and a negative document in
    the replicate, whatever ``label_set``) and, with ``label_set`` ``observed``, the per-label
    suite metrics and the per-item ones that divide by the label count (EB-HAMM).

    A bootstrap replicate holds about 63 % of the distinct documents, so it reaches fewer
    labels than the test set (or any fresh test set of its size) does: the rare labels drop
    out, and with them mostly scores of 0 or 1, so the replicates of such a row are shifted
    away from the point estimate (the demo's LB-F: 0.247, percentile interval [0.260, 0.272]).
    The shift is an artefact of resampling, not a bias of the estimate (whose estimand is the
    average over the labels a test set of this size contains), so these rows get the
    percentile interval moved by median(replicates) − estimate (:func:`interval_bounds`): the
    bootstrap gives the spread, the estimate the centre. The basic (reverse-percentile)
    interval would move it the other way again (the demo's: about [0.222, 0.234]); in a simulation
    of a demo-like population (tests/test_uncertainty_label_set.py) the centred interval
    covered the estimate's expected value in 90 % of 80 test sets, the percentile 11 %, the
    basic 18 % (another seed: 95, 14, 24 %).
    """
    by_key = {(m.family, m.level, m.average, m.metric): m for m in SUITE}
    probe = np.ones(1)

    def counts_labels(metric) -> bool:
        if metric.source == NODES:
            return True
        if metric.source == DOCUMENTS and metric.per_unit is not None:
            return not np.array_equal(
                metric.per_unit(probe, probe, probe, 10 * probe),
                metric.per_unit(probe, probe, probe, 20 * probe),
            )
        return False

    out = []
    for key in keys:
        if key in by_key:
            out.append(label_set == "observed" and counts_labels(by_key[key]))
        else:
            macro_auc = key[0] == "ranking" and key[2:] == ("macro", "auc")
            out.append(macro_auc or (key[2] in ("macro", "macro_hm") and key[3] in COUNT_MEASURES))
    return np.array(out, dtype=bool)


def interval_bounds(
    replicates: np.ndarray, value: np.ndarray, centred: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bounds per column of ``replicates``, moved by median − ``value`` where
    ``centred`` (:func:`label_set_rows`), so that they surround the point estimate.

    A replicate in which a row is undefined is NaN (ROC-AUC of a replicate without a positive
    or without a negative pair): the bounds are those of the defined replicates, NaN if none."""
    low, high = _bounds(replicates, confidence)
    shift = np.where(centred, _median(replicates) - value, 0.0)
    return low - shift, high - shift


def interval_rows(
    tidy: pl.DataFrame, replicates: np.ndarray, settings: Settings, *, label_set: str
) -> pl.DataFrame:
    """``intervals.parquet`` rows of one model: its tidy rows with percentile bounds, centred
    on the estimate (and kept in [0, 1]) for :func:`label_set_rows` (``method``). The
    comparisons' intervals of differences of those rows are centred the same way.

    ``replicates`` is the number of replicates in which the row is defined (the bootstrap's,
    but where a row can be undefined in a replicate: :func:`interval_bounds`); with none, the
    bounds are null."""
    centred = label_set_rows(_keys_of(tidy), label_set)
    low, high = interval_bounds(replicates, tidy["value"].to_numpy(), centred, settings.confidence)
    # Every centred row is a mean of values in [0, 1]; the move must not leave that range.
    low = np.where(centred, np.clip(low, 0.0, 1.0), low)
    high = np.where(centred, np.clip(high, 0.0, 1.0), high)
    return tidy.with_columns(
        pl.Series("low", low, dtype=pl.Float64).fill_nan(None),
        pl.Series("high", high, dtype=pl.Float64).fill_nan(None),
        pl.Series("replicates", (~np.isnan(replicates)).sum(0), dtype=pl.Int64),
        pl.Series("method", np.where(centred, CENTRED, PERCENTILE), dtype=pl.String),
    ).select(INTERVAL_COLUMNS)


def randomization_p(
    a: Units, b: Units, keys: list[Key], *, layout: Layout, weights_key: np.ndarray,
    settings: Settings,
) -> np.ndarray:  # fmt: skip
    """Two-sided p-values of the paired approximate randomization test, per metric."""
    ones = np.ones((1, weights_key.size))
    observed_a, observed_b = (replicate_values([(u, ones)], layout) for u in (a, b))
    observed = np.array([abs(observed_a[k][0] - observed_b[k][0]) for k in keys])
    slack = _TIE * np.maximum(1.0, observed)
    hits = np.zeros(len(keys), dtype=np.int64)
    plan = pair_plan(a, b, layout)
    for first, count in blocks(settings.permutations, layout.width):
        s = swaps(weights_key, seed=settings.seed, first=first, count=count)
        if plan is None:
            keep = 1.0 - s
            star_a = replicate_values([(a, keep), (b, s)], layout)
            star_b = replicate_values([(a, s), (b, keep)], layout)
        else:
            star_a, star_b = swapped_values(plan, s, layout)
        delta = np.column_stack([np.abs(star_a[k] - star_b[k]) for k in keys])
        hits += (delta >= observed - slack).sum(0)
    return (1 + hits) / (1 + settings.permutations)


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (ties kept in their order)."""
    m = p_values.size
    order = np.argsort(p_values, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p_values[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


def uncertainty_tables(
    tidy: dict[str, pl.DataFrame],
    units: dict[str, Units],
    *,
    layout: Layout,
    settings: Settings,
    levels: tuple[str, ...],
    threads: int | None = None,
    ranking: dict[str, RankingUnits] | None = None,
    replicates_out: dict[str, np.ndarray] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``intervals`` and ``comparisons`` over a zoo: ``tidy`` and ``units`` per model, in
    the sheet's order; ``levels`` are the evaluated levels (for the row order); ``ranking``
    the scored models' :class:`~hieval.metrics.uncertainty.ranking.RankingUnits`, whose rows
    ``tidy`` then holds too. ``replicates_out``, when given, receives each model's replicates
    (replicates x its ``tidy`` rows, in their order): the history keeps the headline rows', so
    that a later evaluation on the same documents and seed gets the paired interval of its
    change (:mod:`hieval.reports.changes`).

    Models (bootstrap) and pairs (randomization test) are computed on ``threads`` threads
    (default: the cores this process may use; numpy and scipy's sparse products release the
    GIL); each is independent of the others and of the thread it runs on, so the tables are
    the same for any number of threads.
    """
    models = list(tidy)
    ranking = ranking or {}
    weights_key = doc_keys(layout.doc_ids.to_list())
    keys = {m: _keys_of(tidy[m]) for m in models}
    # Small products on many threads: OpenBLAS's own threads only spin (100x slower matrix-vector
    # products measured on a loaded 2-core machine), so BLAS runs single-threaded here.
    with (
        threadpool_limits(limits=1, user_api="blas"),
        ThreadPoolExecutor(max_workers=threads or default_threads()) as pool,
    ):
        # Block by block, every model with the same weights (drawn once: at 100× MIMIC
        # drawing them is a good part of the bootstrap).
        replicates = {m: np.empty((settings.bootstrap, len(keys[m]))) for m in models}
        counts_only = all(_counts_only(units[m], keys[m], layout) for m in models)
        for first, count in _bootstrap_blocks(counts_only, layout, settings):
            w = poisson_weights(weights_key, seed=settings.seed, first=first, count=count)

            def fill(model: str, w: np.ndarray = w, first: int = first, count: int = count):
                values = block_values(
                    units[model], ranking.get(model), keys[model], w, layout, first=first
                )
                replicates[model][first : first + count] = values

            list(pool.map(fill, models))
        log.info(
            "%d models: %d bootstrap replicates of their metrics", len(models), settings.bootstrap
        )
        if replicates_out is not None:
            replicates_out.update(replicates)
        pairs = [(a, b) for i, a in enumerate(models) for b in models[i + 1 :]]
        zoo = _Zoo(tidy, units, replicates, ranking, layout, weights_key, settings)
        comparisons = list(pool.map(lambda pair: _pair_rows(*pair, zoo), pairs))
    intervals = [
        interval_rows(tidy[m], replicates[m], settings, label_set=layout.label_set) for m in models
    ]
    interval_table = sort_tidy(pl.concat(intervals), levels, models)
    if not comparisons:
        return interval_table, pl.DataFrame(schema=_COMPARISON_SCHEMA)
    table = pl.concat(comparisons)
    if settings.permutations:
        table = table.with_columns(
            pl.col("p_value")
            .map_batches(lambda p: pl.Series(holm(p.to_numpy())), return_dtype=pl.Float64)
            .over("family", "level", "average", "metric")
            .alias("p_adjusted")
        )
    return interval_table, table.select(COMPARISON_COLUMNS)


_COMPARISON_SCHEMA = {
    "model_a": pl.String, "model_b": pl.String, "family": pl.String, "level": pl.String,
    "average": pl.String, "metric": pl.String, "difference": pl.Float64, "low": pl.Float64,
    "high": pl.Float64, "p_value": pl.Float64, "p_adjusted": pl.Float64,
    "permutations": pl.Int64, "test": pl.String,
}  # fmt: skip


@dataclass(frozen=True)
class _Zoo:
    """What every pair's comparison reads: the models' tidy rows, tables and bootstrap
    replicates, the layout, the documents' weight keys and the settings."""

    tidy: dict[str, pl.DataFrame]
    units: dict[str, Units]
    replicates: dict[str, np.ndarray]
    ranking: dict[str, RankingUnits]
    layout: Layout
    weights_key: np.ndarray
    settings: Settings


def _above_cap(ranking: dict[str, RankingUnits], model_a: str, model_b: str, ranked: set) -> set:
    """The AUC rows of a pair that get the paired bootstrap test instead of the randomization
    test: a level where either model has only precomputed bootstrap replicates (above the
    plan's cap, :mod:`hieval.metrics.uncertainty.auc_blocks`; each permutation would pool
    both models' scored pairs) (:mod:`hieval.metrics.uncertainty.bootstrap_test`)."""
    above = {
        level for m in (model_a, model_b) if m in ranking for level in ranking[m].auc_bootstrap
    }
    return {k for k in ranked if k[3] == "auc" and k[1] in above}


def _replicate_error(ranking: dict[str, RankingUnits], model: str, key: Key) -> np.ndarray:
    """Per replicate, the largest error of ``model``'s replicate of the AUC row ``key``: micro
    AUC's binned ``bound`` above the cap, 0 where the replicates are exact (macro, or a level
    the model has below the cap)."""
    level, average = key[1], key[2]
    boot = ranking[model].auc_bootstrap.get(level) if model in ranking else None
    if average != MICRO or boot is None:
        return np.zeros(1)
    return np.nan_to_num(np.asarray(boot["bound"], dtype=np.float64), nan=0.0)


def _bootstrap_tested(
    model_a: str, model_b: str, keys: list[Key], differences: np.ndarray, observed: np.ndarray,
    ranking: dict[str, RankingUnits],
) -> np.ndarray:  # fmt: skip
    """The paired bootstrap test's p-values (conservative end) of the AUC rows ``keys`` of a
    pair above the cap, from their replicates' ``differences`` (replicates × keys); the log
    says which test they got and how far the binning can move p."""
    error = np.column_stack(
        [
            np.broadcast_to(
                _replicate_error(ranking, model_a, k) + _replicate_error(ranking, model_b, k),
                differences.shape[:1],
            )
            for k in keys
        ]
    )
    out = bootstrap_p(differences, observed, error=error)
    log.info(
        "%s vs %s: ROC-AUC at level(s) %s above %s scored pairs: paired bootstrap z-test (%d "
        "replicates) instead of the randomization test; the binned micro replicates move p by "
        "at most %.2g (p_value: the conservative end)",
        model_a, model_b, ", ".join(sorted({k[1] for k in keys})), f"{AUC_MAX_SCORED_PAIRS:,}",
        differences.shape[0], float(np.nanmax(out.p - out.lowest, initial=0.0)),
    )  # fmt: skip
    return out.p


def _pair_rows(model_a: str, model_b: str, zoo: _Zoo) -> pl.DataFrame:
    """The comparison rows of one pair, over the metrics both models have."""
    tidy, units, replicates, ranking = zoo.tidy, zoo.units, zoo.replicates, zoo.ranking
    layout, weights_key, settings = zoo.layout, zoo.weights_key, zoo.settings
    a, b = tidy[model_a], tidy[model_b]
    keys_a, keys_b = _keys_of(a), _keys_of(b)
    where_b = {k: i for i, k in enumerate(keys_b)}
    shared = [i for i, k in enumerate(keys_a) if k in where_b]
    keys = [keys_a[i] for i in shared]
    other = [where_b[k] for k in keys]
    value_a, value_b = a["value"].to_numpy()[shared], b["value"].to_numpy()[other]
    differences = replicates[model_a][:, shared] - replicates[model_b][:, other]
    low, high = interval_bounds(
        differences, value_a - value_b, label_set_rows(keys, layout.label_set), settings.confidence
    )
    p = np.full(len(keys), np.nan)
    test = np.full(len(keys), None, dtype=object)
    permutations = np.full(len(keys), settings.permutations, dtype=object)
    if settings.permutations:
        ranked = (
            set(ranking[model_a].keys) & set(ranking[model_b].keys)
            if model_a in ranking and model_b in ranking
            else set()
        )
        above = _above_cap(ranking, model_a, model_b, ranked)
        scored = [i for i, k in enumerate(keys) if k in ranked and k not in above]
        own = [i for i, k in enumerate(keys) if k not in ranked]
        boot = [i for i, k in enumerate(keys) if k in above]
        if own:
            p[own] = randomization_p(
                units[model_a], units[model_b], [keys[i] for i in own],
                layout=layout, weights_key=weights_key, settings=settings,
            )  # fmt: skip
        if scored:
            p[scored] = ranking_randomization_p(
                ranking[model_a], ranking[model_b], [keys[i] for i in scored],
                weights_key=weights_key, settings=settings,
            )  # fmt: skip
        test[own + scored] = RANDOMIZATION
        if boot:
            p[boot] = _bootstrap_tested(
                model_a, model_b, [keys[i] for i in boot], differences[:, boot],
                (value_a - value_b)[boot], ranking,
            )  # fmt: skip
            test[boot] = BOOTSTRAP
            permutations[boot] = None
    test[np.isnan(p)] = None
    frame = pl.DataFrame(keys, schema=["family", "level", "average", "metric"], orient="row")
    return frame.select(
        pl.lit(model_a).alias("model_a"),
        pl.lit(model_b).alias("model_b"),
        pl.all(),
        pl.Series("difference", value_a - value_b, dtype=pl.Float64),
        pl.Series("low", low, dtype=pl.Float64).fill_nan(None),
        pl.Series("high", high, dtype=pl.Float64).fill_nan(None),
        pl.Series("p_value", p, dtype=pl.Float64).fill_nan(None),
        pl.Series("p_adjusted", p, dtype=pl.Float64).fill_nan(None),
        pl.Series("permutations", permutations.tolist(), dtype=pl.Int64),
        pl.Series("test", test.tolist(), dtype=pl.String),
    )
