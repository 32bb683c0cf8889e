"""How sure are we: bootstrap intervals and paired randomization tests for every tidy metric.

The sampling unit is the document: a test set is a sample of documents, and every metric of
the tidy table is a function of per-document quantities — count sums (micro), per (document,
node) counts (macro, label-based), per-item values (ICM, example-based, PROP-F, HF). So a
resampled test set is the same tables with a weight per document, and every replicate is
computed from weighted sums, never by recounting labels.

- **Bootstrap** (percentile intervals; for the rows averaged over the labels a test set
  contains, centred on the estimate: :func:`label_set_rows`): replicate r gives document d
  the weight w(seed, d, r) ~ Poisson(1) (the Poisson bootstrap: a multinomial resample of N
  documents is N draws, and for large N each document's count is Poisson(1)). The weight is a
  counter-based hash of the seed, the document id and r (:func:`poisson_weights`), so it
  depends on nothing else: a sharded run gives the same replicates as an unsharded one, every
  model is resampled with the same weights (the intervals of differences are paired), and
  adding a model never changes another's interval.
- **Paired approximate randomization test**: under the null hypothesis that two models are
  exchangeable on each document, permutation r swaps their outputs on the documents with
  s(seed, d, r) = 1 (a fair coin from the same hash, another stream). The p-value is
  (1 + #{r: |Δ*_r| ≥ |Δ|}) / (1 + R), Holm-corrected over all pairs of models per metric.

How it stays fast (the issue's target: MIMIC-III full, 5 models, 1,000 replicates and 9,999
permutations per pair): every per-node quantity (P, R, F1, reached, the per-label suite values)
is summed over nodes, and sums can be taken over any partition of the nodes. The bootstrap
skips the formulas on nodes with only TPs (value 1 where reached) or only errors (0). The
randomization test precomputes per pair (:func:`pair_plan`): the gold is the same for both
models, so a swap moves only TP and FP; a node no document moves is a constant; a node one
document moves is one of two values, so its sum is linear in the swaps (one product for all
permutations); a node a few documents move is in one of a few (ΔTP, ΔFP) states, each evaluated
once and looked up (a compiled loop, :mod:`hieval.metrics.state_sums`); only the busiest nodes
are evaluated per permutation. Column sums (micro) move by ``s @ (b − a)``. Results equal the
straightforward computation up to the order of floating-point sums
(tests/test_uncertainty_speed.py recounts swapped and repeated test sets from scratch); models
and pairs run on threads, independently of each other.

Ranking and calibration rows (P@K, R@K, R-precision, MAP, Brier, ECE) come from the scores'
per-document sums (:mod:`hieval.metrics.ranking_uncertainty`), ROC-AUC (micro, macro) from
weighted Mann-Whitney statistics over the scores sorted once
(:mod:`hieval.metrics.auc_uncertainty`), with the same weights and swaps
(:func:`block_values`, :func:`ranking_randomization_p`).

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
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import sparse
from threadpoolctl import threadpool_limits

from hieval.codes.icd9 import CODE_TYPES
from hieval.engine.counts import family_counts
from hieval.engine.groups import Groups, default_threads
from hieval.engine.icm import IcmParams
from hieval.engine.keys import LEAF
from hieval.metrics.prf import PRF, PRF_DENOMINATORS, harmonic_f1
from hieval.metrics.ranking_uncertainty import (
    CONVENTION,
    UNDEFINED,
    RankingUnits,
    auc_pair_plans,
    replicate_mean,
)
from hieval.metrics.ranking_uncertainty import ranking_values as ranking_replicates
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
from hieval.metrics.uncertainty_settings import (  # noqa: F401 (re-exported)
    DEFAULT_BOOTSTRAP,
    DEFAULT_CONFIDENCE,
    DEFAULT_PERMUTATIONS,
    DEFAULT_SEED,
    Settings,
)

log = logging.getLogger(__name__)


INTERVAL_COLUMNS = (*TIDY_KEY, "value", "low", "high", "replicates", "method")
#: ``method`` of an interval: percentile, or the percentile interval centred on the point
#: estimate for the rows averaged over the labels the test set contains (:func:`label_set_rows`).
PERCENTILE, CENTRED = "percentile", "centred"
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
#: The bootstrap's blocks are smaller: its dense per-node arrays then stay in cache (320
#: replicates of a MIMIC-sized model: 0.29 s in blocks of 40, 0.51 s in blocks of 163).
_BOOTSTRAP_BLOCK_CELLS = 1 << 20

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


def blocks(total: int, width: int, cells: int = _BLOCK_CELLS) -> Iterator[tuple[int, int]]:
    """``(first, count)`` blocks of replicates, sized so that a block's weights (documents
    wide) and node sums (3 × nodes of a level wide) stay near ``cells`` values an array."""
    size = max(1, min(total, cells // max(width, 1)))
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


def _macro_rows(
    out: dict[Key, np.ndarray], family: str, level: str, sums: dict, seen: np.ndarray,
    empty: float,
) -> None:  # fmt: skip
    """``macro`` and ``macro_hm`` P/R/F1 from per-node metric sums over ``seen`` nodes;
    ``empty`` where no node is reached."""
    macro = {metric: replicate_mean(sums[metric], seen, empty=empty) for metric in PRF}
    for metric, value in macro.items():
        out[family, level, "macro", metric] = value
    p, r = macro["precision"], macro["recall"]
    out[family, level, "macro_hm", "precision"] = p
    out[family, level, "macro_hm", "recall"] = r
    out[family, level, "macro_hm", "f1"] = np.where(seen > 0, harmonic_f1(p, r), empty)


#: The per-node reductions a replicate needs: sums over nodes of P, R and F1 (macro), the number
#: of nodes reached (``seen``) and, at the flat leaf, Σ per_unit · seen of each per-label metric.
SEEN = "seen"


def _label_metrics() -> list:
    return [m for m in SUITE if m.per_unit is not None and m.source == NODES]


def node_sums(
    tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, *, items: np.ndarray | None = None,
    pure: np.ndarray | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Sums over nodes (the last axis) of every per-node quantity a replicate needs.

    Each is a sum of a function of one node's (TP, FP, FN), so nodes can be summed in any
    partition — the randomization test sums the nodes its swaps cannot move once, and the
    rest per permutation (:func:`swapped_values`). With ``items`` (replicates × 1, the flat
    leaf), the per-label suite metrics' Σ per_unit · seen are added too. ``pure`` (per node:
    0 mixed, 1 only TP, 2 only FP or only FN in every document) spares the formulas where
    their value is known: P, R and F1 are 1 on a reached node with only TPs, 0 on one with only
    errors (rare codes mostly are one or the other).
    """
    seen = (tp + fp + fn) > 0
    if pure is None:
        out = {metric: f(tp, fp, fn).sum(-1) for metric, f in PRF.items()}
    else:
        mixed = pure == 0
        hits = seen[:, pure == 1].sum(-1).astype(np.float64)
        tp_m, fp_m, fn_m = tp[:, mixed], fp[:, mixed], fn[:, mixed]
        out = {metric: f(tp_m, fp_m, fn_m).sum(-1) + hits for metric, f in PRF.items()}
    out[SEEN] = seen.sum(-1).astype(np.float64)
    if items is not None:
        for metric in _label_metrics():
            out[metric.metric] = (metric.per_unit(tp, fp, fn, items) * seen).sum(-1)
    return out


def _add(x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: x[k] + y[k] for k in x}


DocTotal = Callable[[object, np.ndarray], np.ndarray]


def count_rows(
    col: dict[str, np.ndarray], layout: Layout, *, empty: float = CONVENTION
) -> dict[Key, np.ndarray]:
    """The rows that need only the replicate's column sums (``col``: name → values): TP, FP
    and FN of every average, micro P/R/F1, per family, level and code type; micro P, R and F1
    are ``empty`` where their denominator is 0 (:data:`~hieval.metrics.prf.PRF_DENOMINATORS`:
    the replicate drew no predicted code of the slice, no gold code, neither), where the
    point estimate's zero-division convention would say 0."""
    out: dict[Key, np.ndarray] = {}

    def prf_rows(family: str, level: str, counts: dict[str, np.ndarray], averages=("micro",)):
        tp, fp, fn = (counts[m] for m in COUNT_METRICS)
        for average in averages:
            for metric in COUNT_METRICS:
                out[family, level, average, metric] = counts[metric]
        for metric, formula in PRF.items():
            defined = PRF_DENOMINATORS[metric](tp, fp, fn) > 0
            out[family, level, "micro", metric] = np.where(defined, formula(tp, fp, fn), empty)

    kinds = [""] + ([f"_{k}" for k in CODE_TYPES] if layout.split_kinds else [])
    for family, levels in _families(layout):
        for suffix in kinds:
            averages = ("micro",) if suffix else ("micro", "macro", "macro_hm")
            total = {m: 0.0 for m in COUNT_METRICS}
            for level in levels:
                counts = {m: col[f"{family}{suffix}|{level}|{m}"] for m in COUNT_METRICS}
                prf_rows(family + suffix, level, counts, averages)
                total = {m: total[m] + counts[m] for m in COUNT_METRICS}
            if family != "flat" and levels:
                prf_rows(family + suffix, OVERALL, total, averages)
    return out


def _families(layout: Layout) -> list[tuple[str, tuple[str, ...]]]:
    return [("flat", (LEAF,))] + [(f, layout.levels) for f in ("set", "cophe")]


def assemble(
    col: dict[str, np.ndarray],
    nodes: dict[tuple[str, str], dict[str, np.ndarray]],
    doc_total: DocTotal,
    layout: Layout,
    *,
    empty: float = CONVENTION,
) -> dict[Key, np.ndarray]:
    """Every tidy metric per replicate, from the replicate's column sums (``col``: name →
    values), its per-node reductions per (family, level) (:func:`node_sums`) and
    ``doc_total(metric, n)``, the weighted sum over items of a per-item metric whose label
    count is ``n`` (replicates × 1).

    A row whose mean has nothing to average over in a replicate is ``empty`` there
    (:data:`~hieval.metrics.ranking_uncertainty.UNDEFINED` for the bootstrap): micro P, R, F1
    without a predicted, a gold, any code of the slice (:func:`count_rows`), macro without a
    reached node, ICM and the per-item metrics without an item, the per-label ones without an
    item or a label."""
    out = count_rows(col, layout, empty=empty)
    families = _families(layout)

    # Macro: per-node P/R/F1 averaged over the nodes the replicate's documents reach.
    for family, levels in families:
        # A node the replicate's documents do not reach has TP = FP = FN = 0, so P, R and F1 0
        # (the zero-division convention): summing over every node and dividing by the nodes
        # reached is the mean over the nodes reached. ``overall`` pools the levels' sums.
        pooled = None
        for level in levels:
            sums = nodes[family, level]
            _macro_rows(out, family, level, sums, sums[SEEN], empty)
            pooled = sums if pooled is None else _add(pooled, sums)
        if family != "flat" and levels:
            _macro_rows(out, family, OVERALL, pooled, pooled[SEEN], empty)

    # ICM and the comparison suite.
    items = col["item"]
    leaf = nodes["flat", LEAF]
    observed = leaf[SEEN]
    if layout.label_set == "hierarchy":
        if layout.n_labels is None:
            raise ValueError("label_set 'hierarchy' needs the number of leaf codes")
        label_units = np.maximum(float(layout.n_labels), observed)
    else:
        label_units = observed

    def mean(total: np.ndarray, count: np.ndarray) -> np.ndarray:
        return replicate_mean(total, count, empty=empty)

    icm = mean(col["icm|icm"], items)
    # A label's value is a mean over the items: no label counts in a replicate without one.
    labels_counted = np.where(items > 0, label_units, 0.0)
    for metric in SUITE:
        key = (metric.family, metric.level, metric.average, metric.metric)
        if metric.per_unit is None:
            if key[3] == "icm_norm":
                gold_icm = mean(col["icm|icm_gold"], items)
                out[key] = np.where(items > 0, icm_norm(icm, gold_icm), empty)
            elif key[3] == "icm":
                out[key] = icm
            else:
                out[key] = mean(col[f"{metric.family}|{metric.metric}"], items)
        elif metric.source == NODES:  # per label, over the replicate's items
            unseen = metric.per_unit(*(np.zeros((1, 1)),) * 3, items[:, None])[:, 0]
            total = leaf[metric.metric] + (label_units - observed) * unseen
            out[key] = mean(total, labels_counted)
        elif metric.source == DOCUMENTS:  # per item, over the replicate's label set
            out[key] = mean(doc_total(metric, label_units[:, None]), items)
    return out


def _doc_values(units: Units, metric, n: np.ndarray) -> np.ndarray:
    return metric.per_unit(*(units.column(f"flat|{LEAF}|{m}") for m in COUNT_METRICS), n)


def _count_bits(matrix: sparse.csr_matrix, n: int) -> np.ndarray:
    """Per node, which of its TP (1), FP (2) and FN (4) blocks hold a count in some document
    (weights are never negative, so a weighted sum is non-zero only where one is)."""
    present = np.bincount(matrix.indices[matrix.data != 0], minlength=3 * n) > 0
    return present[:n] * 1 | present[n : 2 * n] * 2 | present[2 * n :] * 4


def replicate_values(
    components: list[tuple[Units, np.ndarray]], layout: Layout, *, empty: float = CONVENTION
) -> dict[Key, np.ndarray]:
    """Every tidy metric of the weighted data set Σ_c W_c · (documents of model c), one value
    per row of the weights; ``empty`` where a row has nothing to average over (:func:`assemble`).

    One component (a model, bootstrap weights) is a bootstrap replicate; two (model a with
    1 − S, model b with S) are a model whose documents were swapped with b's where S is 1 —
    the straightforward form of what :func:`swapped_values` computes faster.
    """
    sums = sum(w @ u.columns for u, w in components)
    names = components[0][0].names
    col = {name: sums[:, i] for name, i in names.items()}
    nodes = {}
    for family, level in layout.count_parts():
        n = layout.nodes[level].len()
        summed = sum(w @ u.nodes[family, level] for u, w in components)
        tp, fp, fn = (summed[:, i * n : (i + 1) * n] for i in range(3))
        items = col["item"][:, None] if (family, level) == ("flat", LEAF) else None
        bits = np.bitwise_or.reduce([_count_bits(u.nodes[family, level], n) for u, _ in components])
        pure = np.where(bits == 1, 1, np.where((bits == 2) | (bits == 4), 2, 0))
        nodes[family, level] = node_sums(tp, fp, fn, items=items, pure=pure)

    def doc_total(metric, n: np.ndarray) -> np.ndarray:
        total = 0.0
        for u, w in components:
            weighted = w * u.column("item")
            values = _doc_values(u, metric, n)
            total = total + (weighted @ values if values.ndim == 1 else (weighted * values).sum(1))
        return total

    return assemble(col, nodes, doc_total, layout, empty=empty)


def _node_values(tp, fp, fn, items) -> dict[str, np.ndarray]:
    """Per-node quantities whose sums :func:`node_sums` takes (nodes on the last axis)."""
    seen = (tp + fp + fn) > 0
    out = {metric: f(tp, fp, fn) for metric, f in PRF.items()}
    out[SEEN] = seen.astype(np.float64)
    if items is not None:
        for metric in _label_metrics():
            out[metric.metric] = metric.per_unit(tp, fp, fn, items) * seen
    return out


#: A node that several documents move, with at most this many reachable (ΔTP, ΔFP) states, is
#: evaluated once per state and looked up per permutation; busier nodes are evaluated directly.
_MAX_STATES = 64
#: The dtype of the integer-valued products of the randomization test (the busiest nodes' ΔTP
#: and ΔFP per permutation): their values are integers below 2**24, so float32 holds them
#: exactly and the products read half the memory of float64's.
_EXACT = np.float32


@dataclass(frozen=True)
class _Part:
    """One (family, level) of a pair, split by how many documents the two models differ on.

    ``base_a``/``base_b`` are the sums over the nodes no swap can move plus those one document
    moves, with every swap 0 (model a's side; b's side); ``single`` (documents × quantities)
    is what swapping a document adds to a's side (and takes from b's) through the nodes only
    it moves. The busiest nodes (``totals``: a's TP, FP, FN, a's + b's TP and FP; ``delta``:
    ΔTP and ΔFP per document) are recomputed per permutation; the other nodes several documents
    move are looked up (:class:`PairPlan`)."""

    base_a: dict[str, np.ndarray]
    base_b: dict[str, np.ndarray]
    single: np.ndarray
    names: tuple[str, ...]
    totals: tuple[np.ndarray, ...]
    delta: sparse.csr_matrix


@dataclass(frozen=True)
class PairPlan:
    """What the randomization test of models a and b precomputes once (:func:`pair_plan`).

    A node that several documents move takes one of a few states (ΔTP, ΔFP): ``index`` (such
    nodes of every part × documents) maps the swaps to a state number, offset by ``start``,
    into ``table`` (states × both sides' quantities, :data:`_QUANTITIES` of a then of b):
    per node, the documents that move it and the (integer) state step each one's swap adds;
    ``sections`` are the parts' first rows in ``index``."""

    total_a: np.ndarray
    total_b: np.ndarray
    delta: np.ndarray  # documents × columns: b − a
    names: dict[str, int]
    items: float
    parts: dict[tuple[str, str], _Part]
    index: sparse.csr_matrix
    start: np.ndarray
    table: np.ndarray
    sections: np.ndarray
    a: Units
    b: Units


def _quantities() -> tuple[str, ...]:
    return (*PRF, SEEN, *(m.metric for m in _label_metrics()))


def _column_range(m: sparse.csc_matrix) -> tuple[np.ndarray, np.ndarray]:
    """Per column, the lowest and highest sum of a subset of its entries."""
    low = np.asarray(m.minimum(0).sum(0)).ravel()
    high = np.asarray(m.maximum(0).sum(0)).ravel()
    return low, high


def _state_table(
    counts: tuple[np.ndarray, ...], lows: tuple[np.ndarray, np.ndarray], widths: np.ndarray,
    items: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Every quantity of both sides at every (ΔTP, ΔFP) state of each node (states × 2
    quantities): node i's states are ``start[i]`` + (ΔTP − low) · width + (ΔFP − low); states
    no swap reaches are computed too (and never looked up)."""
    tp_a, fp_a, fn_a, tp_ab, fp_ab = counts
    sizes = widths[0] * widths[1]
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    node = np.repeat(np.arange(sizes.size), sizes)
    local = np.arange(node.size) - start[node]
    x_tp = lows[0][node] + local // widths[1][node]
    x_fp = lows[1][node] + local % widths[1][node]
    tp, fp, fn = tp_a[node] + x_tp, fp_a[node] + x_fp, fn_a[node] - x_tp
    other_tp = tp_ab[node] - tp
    sides = (
        _node_values(tp, fp, fn, items),
        _node_values(other_tp, fp_ab[node] - fp, tp_a[node] + fn_a[node] - other_tp, items),
    )
    zero = np.zeros(node.size)
    table = np.column_stack([side.get(q, zero) for side in sides for q in _quantities()])
    return start, table


def pair_plan(a: Units, b: Units, layout: Layout) -> PairPlan | None:
    """The precomputation of :func:`swapped_values`, or None when the shortcut does not
    apply (the two models' gold sides or items differ: never for models of one gold)."""
    if not np.array_equal(a.column("item"), b.column("item")):
        return None
    items = float(a.column("item").sum())
    parts = {}
    indices, starts, tables, sections, offset = [], [], [], [0], 0
    for family, level in layout.count_parts():
        n = layout.nodes[level].len()
        ma, mb = a.nodes[family, level], b.nodes[family, level]
        if (ma[:, :n] + ma[:, 2 * n :] != mb[:, :n] + mb[:, 2 * n :]).nnz:
            return None
        diff = (mb - ma).tocsc()
        dtp, dfp = diff[:, :n], diff[:, n : 2 * n]
        moved = abs(dtp) + abs(dfp)
        moved.eliminate_zeros()
        moved = moved.tocsc()
        movers = np.diff(moved.indptr)
        ta = np.asarray(ma.sum(0)).ravel()
        tb = np.asarray(mb.sum(0)).ravel()
        tp_a, fp_a, fn_a = ta[:n], ta[n : 2 * n], ta[2 * n :]
        tp_b, fp_b, fn_b = tb[:n], tb[n : 2 * n], tb[2 * n :]
        n_items = np.float64(items) if (family, level) == ("flat", LEAF) else None
        va = _node_values(tp_a, fp_a, fn_a, n_items)
        vb = _node_values(tp_b, fp_b, fn_b, n_items)
        names = tuple(va)
        fixed, one, many = movers == 0, movers == 1, movers >= 2
        doc_of = moved.indices[moved.indptr[:-1][one]]
        single = np.column_stack(
            [
                np.bincount(doc_of, weights=(vb[k] - va[k])[one], minlength=ma.shape[0])
                for k in names
            ]
        )
        base_a = {k: va[k][fixed].sum() + va[k][one].sum() for k in names}
        base_b = {k: va[k][fixed].sum() + vb[k][one].sum() for k in names}
        low_tp, high_tp = _column_range(dtp)
        low_fp, high_fp = _column_range(dfp)
        widths = np.stack([high_tp - low_tp + 1, high_fp - low_fp + 1]).astype(np.int64)
        tabled = many & (widths[0] * widths[1] <= _MAX_STATES)
        busy = many & ~tabled
        counts = (tp_a, fp_a, fn_a, tp_a + tp_b, fp_a + fp_b)
        # Nodes with the same counts and ranges share their states (most rare codes do).
        signature = np.column_stack(
            [*(c[tabled] for c in counts), low_tp[tabled], low_fp[tabled], widths[:, tabled].T]
        )
        unique, inverse = np.unique(signature, axis=0, return_inverse=True)
        start, table = _state_table(
            tuple(unique.T[:5]), (unique[:, 5], unique[:, 6]),
            unique[:, 7:].T.astype(np.int64), n_items,
        )  # fmt: skip
        low = (low_tp[tabled] * widths[1, tabled] + low_fp[tabled]).astype(np.int64)
        starts.append(start[inverse.ravel()] - low + offset)
        offset += table.shape[0]
        tables.append(table)
        index = dtp[:, tabled] @ sparse.diags(widths[1, tabled].astype(np.float64))
        steps = (index + dfp[:, tabled]).T.tocsr()
        steps.data = np.rint(steps.data)  # integer-valued: state steps and count changes
        indices.append(steps.astype(np.int64))
        sections.append(sections[-1] + int(tabled.sum()))
        parts[family, level] = _Part(
            base_a, base_b, single, names, tuple(c[busy] for c in counts),
            sparse.hstack([dtp[:, busy], dfp[:, busy]]).T.tocsr().astype(_EXACT),
        )  # fmt: skip
    index, start, table = sparse.vstack(indices).tocsr(), np.concatenate(starts), np.vstack(tables)
    # The compiled lookup reads table rows unchecked: every state a swap can reach must be one.
    lowest = start + np.asarray(index.minimum(0).sum(1)).ravel()
    highest = start + np.asarray(index.maximum(0).sum(1)).ravel()
    if len(start) and (lowest.min() < 0 or highest.max() >= table.shape[0]):
        raise AssertionError("randomization test: a reachable state lies outside its table")
    return PairPlan(
        a.columns.sum(0), b.columns.sum(0), b.columns - a.columns, a.names, items, parts,
        index, start, table, np.array(sections), a, b,
    )  # fmt: skip


def _looked_up(plan: PairPlan, s: np.ndarray) -> np.ndarray:
    """Per permutation and part, the sums of both sides' quantities over the looked-up nodes
    (permutations × parts × 2 quantities), by the compiled loop of
    :func:`hieval.metrics.state_sums.state_sums`."""
    # Imported here: numba's import is for the randomization test alone, not for every job
    # that imports this module (the workflow's count jobs, config checks).
    from hieval.metrics.state_sums import state_sums

    index = plan.index
    return state_sums(
        np.ascontiguousarray(s.T, dtype=np.uint8),
        index=(index.indptr, index.indices, index.data),
        start=plan.start,
        sections=plan.sections,
        table=plan.table,
    )


def swapped_values(
    plan: PairPlan, s: np.ndarray, layout: Layout
) -> tuple[dict[Key, np.ndarray], dict[Key, np.ndarray]]:
    """Every tidy metric of the two swapped models per row of the swaps ``s`` (1: the models
    trade outputs on the document), as :func:`replicate_values` with components
    ``[(a, 1 − s), (b, s)]`` and ``[(a, s), (b, 1 − s)]`` gives them, computed from what swaps
    change: column sums move by ``s @ (b − a)``; a node no document moves is a constant, one
    that one document moves is one of two values (linear in that document's swap), one that a
    few move is looked up by its state; only the busiest nodes are evaluated per permutation."""
    moved = s @ plan.delta
    exact = s.astype(_EXACT)  # swaps are 0/1: exact
    col_a = plan.total_a + moved
    col_b = plan.total_b - moved
    cols = [{name: c[:, i] for name, i in plan.names.items()} for c in (col_a, col_b)]
    nodes_a, nodes_b = {}, {}
    items = np.full((s.shape[0], 1), plan.items)
    looked = _looked_up(plan, s)
    quantities = _quantities()
    for p, (key, part) in enumerate(plan.parts.items()):
        single = s @ part.single
        sums_a, sums_b = {}, {}
        for i, k in enumerate(part.names):
            q = quantities.index(k)
            sums_a[k] = part.base_a[k] + single[:, i] + looked[:, p, q]
            sums_b[k] = part.base_b[k] - single[:, i] + looked[:, p, len(quantities) + q]
        m = part.totals[0].size
        if m:
            leaf_items = items if key == ("flat", LEAF) else None
            change = (part.delta @ exact.T).T.astype(np.float64)
            dtp, dfp = change[:, :m], change[:, m:]
            tp_a, fp_a, fn_a, tp_ab, fp_ab = part.totals
            star_tp = tp_a + dtp
            many_a = node_sums(star_tp, fp_a + dfp, fn_a - dtp, items=leaf_items)
            # b's side is a's and b's counts less a's side (TP + FN is the gold on both).
            other_tp = tp_ab - star_tp
            many_b = node_sums(
                other_tp, fp_ab - fp_a - dfp, tp_a + fn_a - other_tp, items=leaf_items
            )
            sums_a, sums_b = _add(sums_a, many_a), _add(sums_b, many_b)
        nodes_a[key], nodes_b[key] = sums_a, sums_b

    item = plan.a.column("item")

    def doc_total(which: int) -> DocTotal:
        def total(metric, n: np.ndarray) -> np.ndarray:
            va, vb = (_doc_values(u, metric, n) for u in (plan.a, plan.b))
            if va.ndim == 1 and vb.ndim == 1:
                base, change = (item @ va, item @ vb)[which], s @ (item * (vb - va))
                return base + change if which == 0 else base - change
            # Values that depend on the label count n (one per permutation, a few distinct):
            # computed per distinct n, each permutation's swaps applied by one product.
            sizes, row = np.unique(n[:, 0], return_inverse=True)
            va, vb = (_doc_values(u, metric, sizes[:, None]) for u in (plan.a, plan.b))
            va, vb = np.broadcast_to(va, vb.shape), np.broadcast_to(vb, va.shape)
            base = (va if which == 0 else vb) @ item
            change = (s @ (item * (vb - va)).T)[np.arange(s.shape[0]), row.ravel()]
            return base[row.ravel()] + change if which == 0 else base[row.ravel()] - change

        return total

    return (
        assemble(cols[0], nodes_a, doc_total(0), layout),
        assemble(cols[1], nodes_b, doc_total(1), layout),
    )


# -- intervals and tests ---------------------------------------------------------------------


def _keys_of(tidy: pl.DataFrame) -> list[Key]:
    return list(tidy.select("family", "level", "average", "metric").iter_rows())


def _counts_only(units: Units, keys: list[Key], layout: Layout) -> bool:
    """Whether every row of ``keys`` needs the column sums alone (micro and count rows): no
    per-node work then (at 100× MIMIC that is most of it)."""
    probe = count_rows({name: np.zeros(1) for name in units.names}, layout)
    return all(k in probe for k in keys)


def block_values(
    units: Units, ranking: RankingUnits | None, keys: list[Key], w: np.ndarray, layout: Layout
) -> np.ndarray:
    """One block of replicates × ``keys`` of one model, for the weights ``w``: the count, ICM
    and suite rows from its per-document tables, the ranking and calibration rows from its
    scores' (:mod:`hieval.metrics.ranking_uncertainty`).

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
        values |= ranking_replicates([(ranking, w)], ranked_keys, empty=UNDEFINED)
    missing = [k for k in keys if k not in values]
    if missing:
        raise KeyError(f"no bootstrap formula for the tidy rows {missing[:5]}")
    return np.column_stack([values[k] for k in keys])


def _bootstrap_blocks(
    counts_only: bool, layout: Layout, settings: Settings
) -> Iterator[tuple[int, int]]:
    width = layout.doc_ids.len() if counts_only else layout.width
    cells = _BLOCK_CELLS if counts_only else _BOOTSTRAP_BLOCK_CELLS
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
        out[first : first + count] = block_values(units, ranking, keys, w, layout)
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
        star_a = ranking_replicates([(a, 1.0 - s), (b, s)], keys, auc_plans=plans)
        star_b = ranking_replicates([(a, s), (b, 1.0 - s)], keys, auc_plans=plans)
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
            out.append(macro_auc or (key[2] in ("macro", "macro_hm") and key[3] in PRF))
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
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``intervals`` and ``comparisons`` over a zoo: ``tidy`` and ``units`` per model, in
    the sheet's order; ``levels`` are the evaluated levels (for the row order); ``ranking``
    the scored models' :class:`~hieval.metrics.ranking_uncertainty.RankingUnits`, whose rows
    ``tidy`` then holds too.

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
                values = block_values(units[model], ranking.get(model), keys[model], w, layout)
                replicates[model][first : first + count] = values

            list(pool.map(fill, models))
        log.info(
            "%d models: %d bootstrap replicates of their metrics", len(models), settings.bootstrap
        )
        pairs = [(a, b) for i, a in enumerate(models) for b in models[i + 1 :]]
        comparisons = list(
            pool.map(
                lambda pair: _pair_rows(
                    *pair, tidy, units, replicates, layout=layout, weights_key=weights_key,
                    settings=settings, ranking=ranking,
                ),
                pairs,
            )
        )  # fmt: skip
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
    "permutations": pl.Int64,
}  # fmt: skip


def _pair_rows(
    model_a: str, model_b: str, tidy: dict[str, pl.DataFrame], units: dict[str, Units],
    replicates: dict[str, np.ndarray], *, layout: Layout, weights_key: np.ndarray,
    settings: Settings, ranking: dict[str, RankingUnits],
) -> pl.DataFrame:  # fmt: skip
    """The comparison rows of one pair, over the metrics both models have."""
    a, b = tidy[model_a], tidy[model_b]
    keys_a, keys_b = _keys_of(a), _keys_of(b)
    where_b = {k: i for i, k in enumerate(keys_b)}
    shared = [i for i, k in enumerate(keys_a) if k in where_b]
    keys = [keys_a[i] for i in shared]
    other = [where_b[k] for k in keys]
    value_a, value_b = a["value"].to_numpy()[shared], b["value"].to_numpy()[other]
    low, high = interval_bounds(
        replicates[model_a][:, shared] - replicates[model_b][:, other],
        value_a - value_b,
        label_set_rows(keys, layout.label_set),
        settings.confidence,
    )
    if settings.permutations:
        ranked = (
            set(ranking[model_a].keys) & set(ranking[model_b].keys)
            if model_a in ranking and model_b in ranking
            else set()
        )
        scored = [i for i, k in enumerate(keys) if k in ranked]
        own = [i for i, k in enumerate(keys) if k not in ranked]
        p = np.empty(len(keys))
        p[own] = randomization_p(
            units[model_a], units[model_b], [keys[i] for i in own],
            layout=layout, weights_key=weights_key, settings=settings,
        )  # fmt: skip
        if scored:
            p[scored] = ranking_randomization_p(
                ranking[model_a], ranking[model_b], [keys[i] for i in scored],
                weights_key=weights_key, settings=settings,
            )  # fmt: skip
    else:
        p = np.full(len(keys), np.nan)
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
        pl.lit(settings.permutations, dtype=pl.Int64).alias("permutations"),
    )
