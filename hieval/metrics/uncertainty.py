"""How sure are we: bootstrap intervals and paired randomization tests for every tidy metric.

The sampling unit is the document: a test set is a sample of documents, and every metric of
the tidy table is a function of per-document quantities — count sums (micro), per (document,
node) counts (macro, label-based), per-item values (ICM, example-based, PROP-F, HF). So a
resampled test set is the same tables with a weight per document, and every replicate is
computed from weighted sums, never by recounting labels.

- **Bootstrap** (percentile intervals): replicate r gives document d the weight
  w(seed, d, r) ~ Poisson(1) (the Poisson bootstrap: a multinomial resample of N documents is
  N draws, and for large N each document's count is Poisson(1)). The weight is a counter-based
  hash of the seed, the document id and r (:func:`poisson_weights`), so it depends on nothing
  else: a sharded run gives the same replicates as an unsharded one, every model is resampled
  with the same weights (the intervals of differences are paired), and adding a model never
  changes another's interval.
- **Paired approximate randomization test**: under the null hypothesis that two models are
  exchangeable on each document, permutation r swaps their outputs on the documents with
  s(seed, d, r) = 1 (a fair coin from the same hash, another stream). The p-value is
  (1 + #{r: |Δ*_r| ≥ |Δ|}) / (1 + R), Holm-corrected over all pairs of models per metric.

What is held fixed: ICM's information content and PROP-F's propensities are computed once from
the whole gold (they set the metrics' scale, as the node weights of a sharded run are); the
label set of LB-* and EB-HAMM follows each replicate's documents (``observed``) or is the
hierarchy's leaves (``hierarchy``). Formulas come from their one place: P/R/F1 from
:data:`hieval.metrics.prf.PRF`, label- and example-based measures from the registry's
``per_unit``, ICM and the item measures from :mod:`hieval.metrics.suite`; a replicate whose
weights are all 1 is the point estimate (tested), up to the order of floating-point sums.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import sparse

from hieval.codes import CODE_TYPES
from hieval.engine.counts import family_counts
from hieval.engine.groups import Groups
from hieval.engine.icm import IcmParams
from hieval.engine.keys import LEAF
from hieval.metrics.prf import PRF, harmonic_f1
from hieval.metrics.registry import (
    COUNT_METRICS,
    DOCUMENTS,
    NODES,
    OVERALL,
    SUITE,
    TIDY_KEY,
    sort_tidy,
)
from hieval.metrics.suite import DEFAULT_LABEL_SET, icm_norm, icm_per_item, item_measures

log = logging.getLogger(__name__)

DEFAULT_BOOTSTRAP = 0
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 20240515
DEFAULT_PERMUTATIONS = 999

INTERVAL_COLUMNS = (*TIDY_KEY, "value", "low", "high", "replicates")
COMPARISON_COLUMNS = (
    "model_a", "model_b", "family", "level", "average", "metric",
    "difference", "low", "high", "p_value", "p_adjusted", "permutations",
)  # fmt: skip

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_BOOTSTRAP_STREAM, _SWAP_STREAM = 1, 2
#: Poisson(1)'s cumulative distribution, to turn a uniform into a weight by one search.
_POISSON_CDF = np.cumsum([math.exp(-1) / math.factorial(k) for k in range(20)])
#: |Δ*| ≥ |Δ| is counted with this relative slack: a swap that mirrors the observed difference
#: exactly must count, whatever the last bits of two sums in different orders.
_TIE = 1e-9
#: Replicates computed together: weight blocks stay near 32 MB whatever the number of documents.
_BLOCK_CELLS = 1 << 22

Key = tuple[str, str, str, str]  # family, level, average, metric


# -- replicate weights ---------------------------------------------------------------------


def doc_keys(doc_ids: Sequence[str]) -> np.ndarray:
    """A 64-bit key per document: the first 8 bytes of the BLAKE2b hash of its id (UTF-8).

    Fixed forever (unlike a library's internal hash), so a document weighs the same in a
    replicate on every machine, version and shard count.
    """
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(d.encode(), digest_size=8).digest(), "little")
            for d in doc_ids
        ],
        dtype=np.uint64,
    )


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 that scrambles every bit."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniforms(keys: np.ndarray, *, seed: int, stream: int, first: int, count: int) -> np.ndarray:
    """Uniforms in [0, 1), replicates ``first`` .. ``first + count - 1`` × documents.

    Counter-based: the value of (document, replicate) is SplitMix64 at position r of a
    sequence started at the document's key plus a seed- and stream-derived offset, so it
    depends on (seed, stream, document id, r) alone.
    """
    with np.errstate(over="ignore"):
        offset = _mix(np.array([seed * 4 + stream], dtype=np.uint64))
        steps = (np.arange(first, first + count, dtype=np.uint64) + np.uint64(1)) * _GOLDEN
        z = _mix((keys + offset)[None, :] + steps[:, None])
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def poisson_weights(keys: np.ndarray, *, seed: int, first: int, count: int) -> np.ndarray:
    """Bootstrap weights (Poisson(1) counts) of replicates ``first`` ... as float64 rows."""
    u = uniforms(keys, seed=seed, stream=_BOOTSTRAP_STREAM, first=first, count=count)
    return np.searchsorted(_POISSON_CDF, u, side="right").astype(np.float64)


def swaps(keys: np.ndarray, *, seed: int, first: int, count: int) -> np.ndarray:
    """Randomization swaps (1: the two models trade outputs on the document), as float64 rows."""
    u = uniforms(keys, seed=seed, stream=_SWAP_STREAM, first=first, count=count)
    return (u < 0.5).astype(np.float64)


def blocks(total: int, width: int) -> Iterator[tuple[int, int]]:
    """``(first, count)`` blocks of replicates, sized so that a block's weights (documents
    wide) and node sums (3 × nodes of a level wide) stay near 32 MB an array."""
    size = max(1, min(total, _BLOCK_CELLS // max(width, 1)))
    for first in range(0, total, size):
        yield first, min(size, total - first)


# -- per-document tables ---------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """What every model's tables are aligned to: the documents (the gold's, sorted), the
    evaluated levels and, per level, the nodes any model has a group at (sorted names)."""

    doc_ids: pl.Series
    levels: tuple[str, ...]  # evaluated levels, deepest first
    nodes: dict[str, pl.Series]  # LEAF and each evaluated level
    split_kinds: Callable[[str], str | None] | None  # node -> dx/proc (code system), or none
    label_set: str = DEFAULT_LABEL_SET
    n_labels: int | None = None

    @property
    def width(self) -> int:
        """The widest row of a replicate block: the documents, or a level's 3 × nodes."""
        return max(self.doc_ids.len(), *(3 * names.len() for names in self.nodes.values()))

    def kinds(self, level: str) -> dict[str, np.ndarray]:
        """Per code type, which nodes of ``level`` belong to it (code systems that split)."""
        branch = np.array([self.split_kinds(n) for n in self.nodes[level].to_list()], dtype=object)
        return {kind: branch == kind for kind in CODE_TYPES}

    def count_parts(self) -> list[tuple[str, str]]:
        """(family, level) of each node matrix: flat at the leaf, set-based and CoPHE per
        evaluated level."""
        return [("flat", LEAF)] + [(f, lv) for f in ("set", "cophe") for lv in self.levels]


@dataclass(frozen=True)
class Units:
    """One model's per-document tables, aligned to a :class:`Layout`.

    ``columns`` (documents × named columns) holds what is additive per document: TP/FP/FN per
    (family, level) and per code type, the item indicator and the per-item values of ICM,
    ICM(G,G), PROP-F and HF. ``nodes`` holds per (family, level) a sparse documents ×
    (3 × nodes) matrix, the TP, FP and FN blocks of each (document, node).
    """

    columns: np.ndarray
    names: dict[str, int]
    nodes: dict[tuple[str, str], sparse.csr_matrix]

    def column(self, name: str) -> np.ndarray:
        return self.columns[:, self.names[name]]


def node_table(groups: Groups, node_names: pl.Series, doc_index: np.ndarray) -> pl.DataFrame:
    """A model's groups at one level as ``doc, node, pred, gold`` with global document numbers
    (``doc_index`` maps the model's own) and node names."""
    return pl.DataFrame(
        {
            "doc": doc_index[groups.doc],
            "node": node_names.gather(pl.Series(groups.node, dtype=pl.Int64)),
            "pred": groups.pred,
            "gold": groups.gold,
        },
        schema={"doc": pl.Int64, "node": pl.String, "pred": pl.Int64, "gold": pl.Int64},
    )


def build_units(
    tables: dict[str, pl.DataFrame],
    items: pl.DataFrame,
    *,
    layout: Layout,
    params: IcmParams,
) -> Units:
    """A model's :class:`Units` from its per-level (document, node) tables (:func:`node_table`,
    ``leaf`` and each evaluated level) and its per-item sums (``item_sums.parquet``)."""
    n_docs = layout.doc_ids.len()
    names: dict[str, int] = {}
    columns: list[np.ndarray] = []

    def add(name: str, values: np.ndarray) -> None:
        names[name] = len(columns)
        columns.append(np.asarray(values, dtype=np.float64))

    nodes = {}
    for family, level in layout.count_parts():
        table = tables[level]
        node_names = layout.nodes[level]
        node = node_names.search_sorted(table["node"]).to_numpy().astype(np.int64)
        doc = table["doc"].to_numpy()
        g = Groups(doc, node, table["pred"].to_numpy(), table["gold"].to_numpy())
        tp, pred, gold = (np.asarray(v, dtype=np.int64) for v in family_counts(g, level)[family])
        n = node_names.len()
        blocks_ = (tp, pred - tp, gold - tp)
        matrix = sparse.csr_matrix(
            (
                np.concatenate(blocks_).astype(np.float64),
                (np.tile(doc, 3), np.concatenate([node + i * n for i in range(3)])),
            ),
            shape=(n_docs, 3 * n),
        )
        matrix.eliminate_zeros()
        nodes[family, level] = matrix
        kinds = {"": np.ones(n, dtype=bool)}
        if layout.split_kinds:
            kinds.update({f"_{kind}": mask for kind, mask in layout.kinds(level).items()})
        for suffix, mask in kinds.items():
            for i, metric in enumerate(COUNT_METRICS):
                add(f"{family}{suffix}|{level}|{metric}", matrix[:, i * n : (i + 1) * n] @ mask)

    position = layout.doc_ids.search_sorted(items["doc_id"]).to_numpy()
    if not layout.doc_ids.gather(pl.Series(position)).equals(items["doc_id"], check_names=False):
        raise ValueError("item_sums holds a document the gold lacks")

    def per_item(values: np.ndarray) -> np.ndarray:
        out = np.zeros(n_docs)
        out[position] = values
        return out

    add("item", per_item(np.ones(items.height)))
    icm, icm_gold = icm_per_item(items, params)
    add("icm|icm", per_item(icm))
    add("icm|icm_gold", per_item(icm_gold))
    for (family, metric), values in item_measures(items, params).items():
        add(f"{family}|{metric}", per_item(values))
    return Units(np.column_stack(columns), names, nodes)


# -- replicate values ------------------------------------------------------------------------


def _mean(total: np.ndarray, count: np.ndarray) -> np.ndarray:
    out = np.zeros(np.broadcast_shapes(total.shape, count.shape))
    return np.divide(total, count, out=out, where=count > 0)


def _macro_rows(
    out: dict[Key, np.ndarray], family: str, level: str, sums: dict, seen: np.ndarray
) -> None:
    """``macro`` and ``macro_hm`` P/R/F1 from per-node metric sums over ``seen`` nodes."""
    macro = {metric: _mean(total, seen) for metric, total in sums.items()}
    for metric, value in macro.items():
        out[family, level, "macro", metric] = value
    p, r = macro["precision"], macro["recall"]
    out[family, level, "macro_hm", "precision"] = p
    out[family, level, "macro_hm", "recall"] = r
    out[family, level, "macro_hm", "f1"] = harmonic_f1(p, r)


def replicate_values(
    components: list[tuple[Units, np.ndarray]], layout: Layout
) -> dict[Key, np.ndarray]:
    """Every tidy metric of the weighted data set Σ_c W_c · (documents of model c), one value
    per row of the weights.

    One component (a model, bootstrap weights) is a bootstrap replicate; two (model a with
    1 − S, model b with S) are a model whose documents were swapped with b's where S is 1.
    """
    sums = sum(w @ u.columns for u, w in components)
    names = components[0][0].names
    col = {name: sums[:, i] for name, i in names.items()}
    out: dict[Key, np.ndarray] = {}

    def prf_rows(family: str, level: str, counts: dict[str, np.ndarray], averages=("micro",)):
        tp, fp, fn = (counts[m] for m in COUNT_METRICS)
        for average in averages:
            for metric in COUNT_METRICS:
                out[family, level, average, metric] = counts[metric]
        for metric, formula in PRF.items():
            out[family, level, "micro", metric] = formula(tp, fp, fn)

    families = [("flat", (LEAF,))] + [(f, layout.levels) for f in ("set", "cophe")]
    kinds = [""] + ([f"_{k}" for k in CODE_TYPES] if layout.split_kinds else [])
    for family, levels in families:
        for suffix in kinds:
            averages = ("micro",) if suffix else ("micro", "macro", "macro_hm")
            total = {m: 0.0 for m in COUNT_METRICS}
            for level in levels:
                counts = {m: col[f"{family}{suffix}|{level}|{m}"] for m in COUNT_METRICS}
                prf_rows(family + suffix, level, counts, averages)
                total = {m: total[m] + counts[m] for m in COUNT_METRICS}
            if family != "flat" and levels:
                prf_rows(family + suffix, OVERALL, total, averages)

    # Macro: per-node P/R/F1 averaged over the nodes the replicate's documents reach.
    node_sums = {}
    for family, level in layout.count_parts():
        n = layout.nodes[level].len()
        summed = sum(w @ u.nodes[family, level] for u, w in components)
        node_sums[family, level] = tuple(summed[:, i * n : (i + 1) * n] for i in range(3))
    for family, levels in families:
        # A node the replicate's documents do not reach has TP = FP = FN = 0, so P, R and F1 0
        # (the zero-division convention): summing over every node and dividing by the nodes
        # reached is the mean over the nodes reached. ``overall`` pools the levels' sums.
        pooled = {m: 0.0 for m in PRF}
        pooled_seen = 0
        for level in levels:
            tp, fp, fn = node_sums[family, level]
            seen = np.count_nonzero(tp + fp + fn, axis=1)
            sums = {m: f(tp, fp, fn).sum(1) for m, f in PRF.items()}
            _macro_rows(out, family, level, sums, seen)
            pooled = {m: pooled[m] + sums[m] for m in PRF}
            pooled_seen = pooled_seen + seen
        if family != "flat" and levels:
            _macro_rows(out, family, OVERALL, pooled, pooled_seen)

    # ICM and the comparison suite.
    items = col["item"]
    tp, fp, fn = node_sums["flat", LEAF]
    seen = (tp + fp + fn) > 0
    observed = seen.sum(1).astype(np.float64)
    if layout.label_set == "hierarchy":
        if layout.n_labels is None:
            raise ValueError("label_set 'hierarchy' needs the number of leaf codes")
        label_units = np.maximum(float(layout.n_labels), observed)
    else:
        label_units = observed
    icm = _mean(col["icm|icm"], items)
    for metric in SUITE:
        key = (metric.family, metric.level, metric.average, metric.metric)
        if metric.per_unit is None:
            if key[3] == "icm_norm":
                out[key] = icm_norm(icm, _mean(col["icm|icm_gold"], items))
            elif key[3] == "icm":
                out[key] = icm
            else:
                out[key] = _mean(col[f"{metric.family}|{metric.metric}"], items)
        elif metric.source == NODES:  # per label, over the replicate's items
            n = items[:, None]
            units = metric.per_unit(tp, fp, fn, n)
            unseen = metric.per_unit(*(np.zeros((1, 1)),) * 3, n)[:, 0]
            total = (units * seen).sum(1) + (label_units - observed) * unseen
            out[key] = _mean(total, label_units)
        elif metric.source == DOCUMENTS:  # per item, over the replicate's label set
            n = label_units[:, None]
            total = 0.0
            for u, w in components:
                weighted = w * u.column("item")
                values = metric.per_unit(*(u.column(f"flat|{LEAF}|{m}") for m in COUNT_METRICS), n)
                total = total + (
                    weighted @ values if values.ndim == 1 else (weighted * values).sum(1)
                )
            out[key] = _mean(total, items)
    return out


# -- intervals and tests ---------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """``uncertainty.*`` of the config: replicates (0: off), confidence, seed, permutations."""

    bootstrap: int = DEFAULT_BOOTSTRAP
    confidence: float = DEFAULT_CONFIDENCE
    seed: int = DEFAULT_SEED
    permutations: int = DEFAULT_PERMUTATIONS


def _keys_of(tidy: pl.DataFrame) -> list[Key]:
    return list(tidy.select("family", "level", "average", "metric").iter_rows())


def bootstrap_matrix(
    units: Units, keys: list[Key], *, layout: Layout, weights_key: np.ndarray, settings: Settings
) -> np.ndarray:
    """Replicates × metrics (``keys``, the order of the model's tidy rows)."""
    out = np.empty((settings.bootstrap, len(keys)))
    for first, count in blocks(settings.bootstrap, layout.width):
        w = poisson_weights(weights_key, seed=settings.seed, first=first, count=count)
        values = replicate_values([(units, w)], layout)
        missing = [k for k in keys if k not in values]
        if missing:
            raise KeyError(f"no bootstrap formula for the tidy rows {missing[:5]}")
        out[first : first + count] = np.column_stack([values[k] for k in keys])
    return out


def _bounds(values: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    tail = (1 - confidence) / 2
    low, high = np.quantile(values, [tail, 1 - tail], axis=0)
    return low, high


def interval_rows(tidy: pl.DataFrame, replicates: np.ndarray, settings: Settings) -> pl.DataFrame:
    """``intervals.parquet`` rows of one model: its tidy rows with percentile bounds."""
    low, high = _bounds(replicates, settings.confidence)
    return tidy.with_columns(
        pl.Series("low", low, dtype=pl.Float64),
        pl.Series("high", high, dtype=pl.Float64),
        pl.lit(settings.bootstrap, dtype=pl.Int64).alias("replicates"),
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
    for first, count in blocks(settings.permutations, layout.width):
        s = swaps(weights_key, seed=settings.seed, first=first, count=count)
        keep = 1.0 - s
        star_a = replicate_values([(a, keep), (b, s)], layout)
        star_b = replicate_values([(a, s), (b, keep)], layout)
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
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``intervals`` and ``comparisons`` over a zoo: ``tidy`` and ``units`` per model, in
    the sheet's order; ``levels`` are the evaluated levels (for the row order)."""
    models = list(tidy)
    weights_key = doc_keys(layout.doc_ids.to_list())
    keys = {m: _keys_of(tidy[m]) for m in models}
    replicates, intervals = {}, []
    for model in models:
        replicates[model] = bootstrap_matrix(
            units[model], keys[model], layout=layout, weights_key=weights_key, settings=settings
        )
        intervals.append(interval_rows(tidy[model], replicates[model], settings))
        log.info(
            "%s: %d bootstrap replicates of %d metrics", model, settings.bootstrap, len(keys[model])
        )
    comparisons = []
    for i, model_a in enumerate(models):
        for model_b in models[i + 1 :]:
            comparisons.append(
                _pair_rows(
                    model_a,
                    model_b,
                    tidy,
                    units,
                    replicates,
                    layout=layout,
                    weights_key=weights_key,
                    settings=settings,
                )
            )
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
    "permutations": pl.Int64,
}  # fmt: skip


def _pair_rows(
    model_a: str, model_b: str, tidy: dict[str, pl.DataFrame], units: dict[str, Units],
    replicates: dict[str, np.ndarray], *, layout: Layout, weights_key: np.ndarray,
    settings: Settings,
) -> pl.DataFrame:  # fmt: skip
    """The comparison rows of one pair, over the metrics both models have."""
    a, b = tidy[model_a], tidy[model_b]
    keys_a, keys_b = _keys_of(a), _keys_of(b)
    where_b = {k: i for i, k in enumerate(keys_b)}
    shared = [i for i, k in enumerate(keys_a) if k in where_b]
    keys = [keys_a[i] for i in shared]
    other = [where_b[k] for k in keys]
    value_a, value_b = a["value"].to_numpy()[shared], b["value"].to_numpy()[other]
    low, high = _bounds(
        replicates[model_a][:, shared] - replicates[model_b][:, other], settings.confidence
    )
    if settings.permutations:
        p = randomization_p(
            units[model_a], units[model_b], keys,
            layout=layout, weights_key=weights_key, settings=settings,
        )  # fmt: skip
    else:
        p = np.full(len(keys), np.nan)
    frame = pl.DataFrame(keys, schema=["family", "level", "average", "metric"], orient="row")
    return frame.select(
        pl.lit(model_a).alias("model_a"),
        pl.lit(model_b).alias("model_b"),
        pl.all(),
        pl.Series("difference", value_a - value_b, dtype=pl.Float64),
        pl.Series("low", low, dtype=pl.Float64),
        pl.Series("high", high, dtype=pl.Float64),
        pl.Series("p_value", p, dtype=pl.Float64).fill_nan(None),
        pl.Series("p_adjusted", p, dtype=pl.Float64).fill_nan(None),
        pl.lit(settings.permutations, dtype=pl.Int64).alias("permutations"),
    )
