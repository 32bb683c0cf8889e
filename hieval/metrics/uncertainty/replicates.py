"""Every tidy count-family and item metric per replicate, from weighted sums of
:class:`~hieval.metrics.uncertainty.units.Units`: the bootstrap's (:func:`replicate_values`)
and the randomization test's swapped models (:func:`pair_plan`, :func:`swapped_values`).
Each formula is its declaration's (:data:`hieval.metrics.count_measures.COUNT_MEASURES`,
the registry's ``per_unit``, :mod:`hieval.metrics.suite`)."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from hieval.codes.icd9 import CODE_TYPES
from hieval.engine.keys import LEAF
from hieval.metrics.arithmetic import (
    exact_parts,
    exact_products_sum,
    exact_weighted_sums,
    round_parts,
)
from hieval.metrics.count_measures import COUNT_MEASURES
from hieval.metrics.registry import (
    COUNT_METRICS,
    DOCUMENTS,
    NODES,
    OVERALL,
    SUITE,
)
from hieval.metrics.suite import icm_norm
from hieval.metrics.uncertainty.ranking import (
    CONVENTION,
    replicate_mean,
)
from hieval.metrics.uncertainty.units import Key, Layout, Units

log = logging.getLogger(__name__)


def _macro_rows(
    out: dict[Key, np.ndarray], family: str, level: str, sums: dict, seen: np.ndarray,
    empty: float,
) -> None:  # fmt: skip
    """``macro`` and ``macro_hm`` rows of every count measure from per-node measure sums over
    ``seen`` nodes; ``empty`` where no node is reached."""
    macro = {name: replicate_mean(sums[name], seen, empty=empty) for name in COUNT_MEASURES}
    for name, value in macro.items():
        out[family, level, "macro", name] = value
    p, r = macro["precision"], macro["recall"]
    for name, measure in COUNT_MEASURES.items():
        out[family, level, "macro_hm", name] = (
            macro[name] if measure.of_pr is None else np.where(seen > 0, measure.of_pr(p, r), empty)
        )


#: The per-node reductions a replicate needs: sums over nodes of P, R and F1 (macro), the number
#: of nodes reached (``seen``) and, at the flat leaf, Σ per_unit · seen of each per-label metric.
SEEN = "seen"


def _label_metrics() -> list:
    """The per-label suite metrics that are means over labels (their per-node sums); a
    ``micro`` one is its formula of the column sums (:func:`assemble`)."""
    return [
        m for m in SUITE if m.per_unit is not None and m.source == NODES and m.average != "micro"
    ]


def rounded(sums: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """:func:`node_sums`' sums, exact parts correctly rounded."""
    return {k: round_parts(v) if v.ndim == 2 else v for k, v in sums.items()}


def _plain_sum(values: np.ndarray, plus: np.ndarray | None = None) -> np.ndarray:
    """numpy's sum over the last axis (and ``plus``): the randomization test's per-permutation
    sums, which compare models rather than reproduce a reported value."""
    total = values.sum(-1)
    return total if plus is None else total + plus


#: Terms the bootstrap's exact sums slice in numpy (:func:`arithmetic.exact_parts`, about 3 ns
#: a term) before the compiled ones take over (:mod:`hieval.metrics.uncertainty.exact_rows`,
#: about 1.5 ns): compiling them costs 0.6-1.2 s on a fresh install (0.2 s to load once
#: cached), more than a small zoo's whole bootstrap saves (the demo's sums 99M terms), so only
#: a large one switches, after about 0.4 s of numpy (the benchmark's zoo sums 612M).
#: Both give the same numbers, the correctly rounded sums.
_NUMPY_TERMS = 120_000_000
_numpy_terms = 0


def _exact_parts(values: np.ndarray, plus: np.ndarray | None = None) -> np.ndarray:
    """Exact parts of the sums over the last axis (and ``plus``), in numpy for the first
    :data:`_NUMPY_TERMS` terms of the process, compiled after."""
    global _numpy_terms
    if _numpy_terms < _NUMPY_TERMS:
        _numpy_terms += values.size  # from several threads: a count, not a bound
        return exact_parts(values, plus)
    # Imported here: numba's import and compiled code are for large bootstraps alone, not for
    # every job that imports this module.
    from hieval.metrics.uncertainty.exact_rows import row_parts

    return row_parts(values, plus)


def node_sums(
    tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, *, items: np.ndarray | None = None,
    pure: np.ndarray | None = None, exact: bool = False,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Sums over nodes (the last axis) of every per-node quantity a replicate needs.

    Each is a sum of a function of one node's (TP, FP, FN), so nodes can be summed in any
    partition — the randomization test sums the nodes its swaps cannot move once, and the
    rest per permutation (:func:`swapped_values`). With ``items`` (replicates × 1, the flat
    leaf), the per-label suite metrics' Σ per_unit · seen are added too. ``pure`` (per node:
    0 mixed, 1 only TP, 2 only FP or only FN in every document) spares the formulas where
    their value is known: P, R and F1 are 1 on a reached node with only TPs, 0 on one with only
    errors (rare codes mostly are one or the other). ``exact``: each sum is its exact parts
    (replicates × parts, :func:`~hieval.metrics.arithmetic.exact_parts`), rounded correctly
    where a row uses it (:func:`rounded`) as the reported macro means are, so that the
    bootstrap's all-ones replicate is the reported value bit for bit; the ``overall`` rows
    concatenate the levels' parts (:func:`_add`).
    """
    total = _exact_parts if exact else _plain_sum
    seen = (tp + fp + fn) > 0
    if pure is None:
        out = {metric: total(f(tp, fp, fn)) for metric, f in COUNT_MEASURES.items()}
    else:
        mixed = pure == 0
        hits = seen[:, pure == 1].sum(-1).astype(np.float64)
        tp_m, fp_m, fn_m = tp[:, mixed], fp[:, mixed], fn[:, mixed]
        out = {
            metric: total(f(tp_m, fp_m, fn_m), plus=hits) for metric, f in COUNT_MEASURES.items()
        }
    out[SEEN] = seen.sum(-1).astype(np.float64)
    if items is not None:
        for metric in _label_metrics():
            out[metric.metric] = total(metric.per_unit(tp, fp, fn, items) * seen)
    return out


def _add(x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Node sums of two partitions of the nodes added (exact parts concatenated)."""
    return {k: np.concatenate([x[k], y[k]], -1) if x[k].ndim == 2 else x[k] + y[k] for k in x}


DocTotal = Callable[[object, np.ndarray], np.ndarray]


def count_rows(
    col: dict[str, np.ndarray], layout: Layout, *, empty: float = CONVENTION
) -> dict[Key, np.ndarray]:
    """The rows that need only the replicate's column sums (``col``: name → values): TP, FP
    and FN of every average, micro P/R/F1, per family, level and code type; micro P, R and F1
    are ``empty`` where their denominator is 0 (each measure's declared ``denominator``:
    the replicate drew no predicted code of the slice, no gold code, neither), where the
    point estimate's zero-division convention would say 0."""
    out: dict[Key, np.ndarray] = {}

    def prf_rows(family: str, level: str, counts: dict[str, np.ndarray], averages=("micro",)):
        tp, fp, fn = (counts[m] for m in COUNT_METRICS)
        for average in averages:
            for metric in COUNT_METRICS:
                out[family, level, average, metric] = counts[metric]
        for metric, measure in COUNT_MEASURES.items():
            defined = measure.denominator(tp, fp, fn) > 0
            out[family, level, "micro", metric] = np.where(defined, measure(tp, fp, fn), empty)

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
    (:data:`~hieval.metrics.uncertainty.ranking.UNDEFINED` for the bootstrap): micro P, R, F1
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
            _macro_rows(out, family, level, rounded(sums), sums[SEEN], empty)
            pooled = sums if pooled is None else _add(pooled, sums)
        if family != "flat" and levels:
            _macro_rows(out, family, OVERALL, rounded(pooled), pooled[SEEN], empty)

    # ICM and the comparison suite.
    items = col["item"]
    leaf = rounded(nodes["flat", LEAF])
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
        elif metric.average == "micro":  # the formula of the summed counts, label set x items
            tp, fp, fn = (col[f"flat|{LEAF}|{m}"] for m in COUNT_METRICS)
            summed = metric.per_unit(tp, fp, fn, label_units * items)
            out[key] = np.where(items > 0, summed, empty)
        elif metric.source == NODES:  # per label, over the replicate's items
            unseen = metric.per_unit(*(np.zeros((1, 1)),) * 3, items[:, None])[:, 0]
            total = leaf[metric.metric] + (label_units - observed) * unseen
            out[key] = mean(total, labels_counted)
        elif metric.source == DOCUMENTS:  # per item, over the replicate's label set
            out[key] = mean(doc_total(metric, label_units[:, None]), items)
    return out


def _doc_values(units: Units, metric, n: np.ndarray) -> np.ndarray:
    return metric.per_unit(*(units.column(f"flat|{LEAF}|{m}") for m in COUNT_METRICS), n)


#: :func:`_count_bits` of the per-document node tables seen, by the table's id (a weak
#: reference checks it is the same table, and drops the entry with it): the bootstrap asks
#: for the same model's tables in every block of replicates.
_BITS: dict[int, tuple[weakref.ref, np.ndarray]] = {}


def _count_bits(matrix: sparse.csr_matrix, n: int) -> np.ndarray:
    """Per node, which of its TP (1), FP (2) and FN (4) blocks hold a count in some document
    (weights are never negative, so a weighted sum is non-zero only where one is)."""
    key = id(matrix)
    kept = _BITS.get(key)
    if kept is not None and kept[0]() is matrix and len(kept[1]) == n:
        return kept[1]
    present = np.bincount(matrix.indices[matrix.data != 0], minlength=3 * n) > 0
    bits = present[:n] * 1 | present[n : 2 * n] * 2 | present[2 * n :] * 4
    _BITS[key] = (weakref.ref(matrix, lambda _, key=key: _BITS.pop(key, None)), bits)
    return bits


def _stacked(components: list[tuple[Units, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The components' weights side by side and their per-document tables stacked: Σ_c W_c ·
    columns_c is one product. One component's own arrays as they are (the exact sums remember
    how they sliced a table they saw before)."""
    if len(components) == 1:
        units, w = components[0]
        return w, units.columns
    return np.hstack([w for _, w in components]), np.vstack([u.columns for u, _ in components])


def replicate_values(
    components: list[tuple[Units, np.ndarray]], layout: Layout, *, empty: float = CONVENTION
) -> dict[Key, np.ndarray]:
    """Every tidy metric of the weighted data set Σ_c W_c · (documents of model c), one value
    per row of the weights; ``empty`` where a row has nothing to average over (:func:`assemble`).

    One component (a model, bootstrap weights) is a bootstrap replicate; two (model a with
    1 − S, model b with S) are a model whose documents were swapped with b's where S is 1 —
    the straightforward form of what :func:`swapped_values` computes faster.
    """
    sums = exact_weighted_sums(*_stacked(components), remember=len(components) == 1)
    names = components[0][0].names
    col = {name: sums[:, i] for name, i in names.items()}
    nodes = {}
    # W @ N as (Nᵀ @ Wᵀ)ᵀ, as scipy computes it, with Wᵀ made contiguous once here rather than
    # copied by scipy for every part; the node sums read the node-major result as it lies.
    transposed = [(u, np.ascontiguousarray(w.T)) for u, w in components]
    for family, level in layout.count_parts():
        n = layout.nodes[level].len()
        summed = transposed[0][0].nodes[family, level].T @ transposed[0][1]
        for u, wt in transposed[1:]:
            summed += u.nodes[family, level].T @ wt
        tp, fp, fn = (summed[i * n : (i + 1) * n].T for i in range(3))
        items = col["item"][:, None] if (family, level) == ("flat", LEAF) else None
        bits = np.bitwise_or.reduce([_count_bits(u.nodes[family, level], n) for u, _ in components])
        pure = np.where(bits == 1, 1, np.where((bits == 2) | (bits == 4), 2, 0))
        nodes[family, level] = node_sums(tp, fp, fn, items=items, pure=pure, exact=True)

    def doc_total(metric, n: np.ndarray) -> np.ndarray:
        weighted = np.hstack([w * u.column("item") for u, w in components])
        values = [_doc_values(u, metric, n) for u, _ in components]
        if all(v.ndim == 1 for v in values):
            return exact_weighted_sums(weighted, np.concatenate(values))
        width = weighted.shape[0]
        values = [np.broadcast_to(v, (width, v.shape[-1])) for v in values]
        return exact_products_sum(weighted, np.hstack(values))

    return assemble(col, nodes, doc_total, layout, empty=empty)


def _node_values(tp, fp, fn, items) -> dict[str, np.ndarray]:
    """Per-node quantities whose sums :func:`node_sums` takes (nodes on the last axis)."""
    seen = (tp + fp + fn) > 0
    out = {metric: f(tp, fp, fn) for metric, f in COUNT_MEASURES.items()}
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
    return (*COUNT_MEASURES, SEEN, *(m.metric for m in _label_metrics()))


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
    :func:`hieval.metrics.uncertainty.state_sums.state_sums`."""
    # Imported here: numba's import is for the randomization test alone, not for every job
    # that imports this module (the workflow's count jobs, config checks).
    from hieval.metrics.uncertainty.state_sums import state_sums

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
