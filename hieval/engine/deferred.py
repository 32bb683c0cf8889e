"""Counting now, weighing later: the count pass of labels whose ICM node weights are known
only once more documents are counted (:class:`hieval.Evaluator`'s chunks of batches).

Why: ICM's, HF's and PROP-F's per-item sums weigh each document's (document, node) groups by
node weights that depend on the whole gold (:func:`hieval.engine.icm.node_weights`). One
evaluation knows the gold before its count pass and sums the items from the groups the counts
use. A chunk of batches does not, and summing its items at the end meant decoding and grouping
every label a second time (about a quarter of the Evaluator's extra CPU time at 100x). Here the
count pass keeps what the item sums read of each slice's groups, compactly (3 bytes a group
on ICD-9's tree: the node, which side holds it, and the documents as runs), and takes the sums
that need no weight at once: LCA-F's set sizes (node depths only) and the gold frequencies the
weights are made from (:class:`~hieval.engine.icm.GoldCounts`: the set family's gold counts,
no pass of their own).
:func:`weighed_item_sums` later adds the kept groups up with the final weights: the same
integer sums as :func:`hieval.engine.icm.slice_item_sums`, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from hieval.engine.counts import (
    COMPILED_FROM_LABELS,
    NODE_SUMS,
    DocSink,
    add_node_sums,
    count_slice,
    empty_sums,
)
from hieval.engine.groups import Groups, Slice, parallel_map, slices, sum_by_doc
from hieval.engine.icm import (
    ALL_SUMS,
    FIXED_POINT,
    ITEM_SUMS,
    PROP_SUMS,
    FixedWeights,
    GoldCounts,
    IcmParams,
)
from hieval.engine.icm import _items as gold_items
from hieval.engine.keys import LEAF, CodeSpace, Labels
from hieval.engine.lca import slice_lca_sums

_PRED, _GOLD = 1, 2  # a kept group's side bits
_SET_GOLD = NODE_SUMS.index("set_gold")


def _index_type(size: int) -> type:
    """The smallest integer type of indices below ``size`` (a tree of ICD-9: 16 bits)."""
    return np.uint16 if size <= 1 << 16 else np.int32


@dataclass(frozen=True)
class KeptGroups:
    """(document, node) groups of a slice as the item sums read them: whether any predicted
    and any gold label is under the node, not how many. A part's groups are ordered by
    document, so the documents are kept as runs: 3 bytes a group on ICD-9's tree."""

    node: np.ndarray  # the smallest index type of the space
    side: np.ndarray  # uint8: _PRED | _GOLD bits
    run_doc: np.ndarray  # int32, each document run's (slice-local) document
    run_start: np.ndarray  # int32, where it starts

    @classmethod
    def of(cls, groups: Groups, *, nodes: int) -> KeptGroups:
        side = (groups.pred > 0).astype(np.uint8)
        side |= (groups.gold > 0).astype(np.uint8) << 1
        start = groups.doc_starts
        return cls(
            groups.node.astype(_index_type(nodes)),
            side,
            groups.doc[start].astype(np.int32),
            start.astype(np.int32),
        )

    def groups(self) -> Groups:
        """The groups again (counts 0 or 1: all the item sums look at)."""
        lengths = np.diff(np.append(self.run_start, self.node.size))
        doc = np.repeat(self.run_doc.astype(np.int64), lengths)
        return Groups(
            doc,
            self.node.astype(np.int64),
            (self.side & _PRED).astype(np.int64),
            (self.side >> 1).astype(np.int64),
        )

    @property
    def gold_nodes(self) -> np.ndarray:
        return self.node[(self.side & _GOLD) > 0]


@dataclass(frozen=True)
class KeptSlice:
    """What a slice's item sums need later: its documents, its tree and leaf groups, and its
    LCA-F sizes (weighed by nothing)."""

    first: int
    end: int
    labels: int  # distinct labels: the compiled kernels' threshold, as for the slice
    tree: list[KeptGroups]
    leaf: KeptGroups
    lca: np.ndarray  # (3, documents) int64


@dataclass(frozen=True)
class Kept:
    """What the item sums of a chunk's labels need once the weights are known, in place of
    the labels: their documents, which are gold items, the code space and the slices."""

    doc_ids: pl.Series
    items: np.ndarray  # bool per document: a gold item (IcmParams.empty_gold)
    space: CodeSpace
    labels: int  # keys encoded
    slices: list[KeptSlice]


@dataclass(frozen=True)
class Counted:
    """The count pass of one chunk: node sums per level, per-document rows, ICM's gold
    counts, and what :func:`weighed_item_sums` needs."""

    sums: dict[str, np.ndarray]
    docs: pl.DataFrame
    gold: GoldCounts
    kept: Kept


def count_keeping_items(
    labels: Labels,
    *,
    evaluated: tuple[str, ...],
    params: IcmParams,
    depth: np.ndarray,
    threads: int | None = None,
) -> Counted:
    """:func:`hieval.engine.driver.count_labels` that also keeps each slice's groups for the
    item sums and takes what needs no weights from them (``depth``: the code space's
    :func:`~hieval.engine.lca.node_depths`, built once for chunks sharing a space)."""
    space = labels.space
    n_tree, n_codes = space.tree_nodes.len(), space.codes.len()
    slots = space.tree_slots
    # ICM's gold counts are the set family's gold counts the count pass sums anyway (per
    # node, the documents with a gold label under it; per code, at the leaf level); only the
    # tree's levels the counts do not cover (the root, those above max_level, or every node
    # of a tree without level slots) are counted from the kept groups.
    counted = {LEAF, *evaluated} if slots is not None else set()
    uncounted = [i for i, level in enumerate(slots or [None]) if level not in counted]

    def one_slice(part: Slice):
        counts = count_slice(part, evaluated)
        tree = [KeptGroups.of(g, nodes=n_tree) for g in part.tree_groups()]
        leaf = KeptGroups.of(part.groups(LEAF), nodes=n_codes)
        lca = slice_lca_sums(part, depth)
        kept = KeptSlice(part.first, part.end, part.code.size, tree, leaf, lca)
        freq = np.zeros(n_tree, dtype=np.int64)
        for i in uncounted:
            freq += np.bincount(tree[i].gold_nodes, minlength=n_tree)
        if slots is None:
            return counts, kept, freq, np.bincount(leaf.gold_nodes, minlength=n_codes)
        return counts, kept, freq, None

    totals: dict[str, np.ndarray] = {}
    kept: list[KeptSlice] = []
    freq = np.zeros(n_tree, dtype=np.int64)
    exact = np.zeros(n_codes, dtype=np.int64)
    with DocSink(evaluated, labels.doc_ids, None) as docs:
        for counts, part, node_f, code_f in parallel_map(one_slice, slices(labels), threads):
            add_node_sums(totals, counts)
            docs.add(counts.doc_rows)
            kept.append(part)
            freq += node_f
            if code_f is not None:
                exact += code_f
    if totals and slots is not None:
        exact += totals[LEAF][_SET_GOLD].astype(np.int64)
        for level, (canonical, tree_id) in slots.items():
            if level in counted:
                level_gold = totals[level][_SET_GOLD].astype(np.int64)
                np.add.at(freq, tree_id[canonical], level_gold[canonical])
    return Counted(
        totals or empty_sums(space, evaluated),
        docs.frame(),
        GoldCounts.of(labels, (freq, exact), params),
        Kept(labels.doc_ids, gold_items(labels, params), space, labels.keys.size, kept),
    )


def weighed_item_sums(
    kept: Kept,
    weights: pl.DataFrame,
    *,
    threads: int | None = None,
    fixed: FixedWeights | None = None,
) -> pl.DataFrame:
    """The per-item sums of :func:`hieval.engine.driver.labels_item_sums` (the same frame)
    from what :func:`count_keeping_items` kept of the labels; ``fixed``: ``weights`` aligned
    to the kept code space already."""
    weights = fixed if fixed is not None else FixedWeights.of(weights, kept.space)
    sums = np.zeros((len(ALL_SUMS), kept.doc_ids.len()), np.int64)

    def one_slice(part: KeptSlice) -> tuple[int, int, np.ndarray]:
        return part.first, part.end, _slice_sums(part, weights)

    for first, end, part_sums in parallel_map(one_slice, kept.slices, threads):
        sums[:, first:end] = part_sums
    # As ItemSums.frame: a row per gold item, the IC and w sums out of fixed point.
    items = np.flatnonzero(kept.items)
    columns = {"doc_id": kept.doc_ids.gather(pl.Series(items, dtype=pl.Int64))}
    for name, row in zip(ALL_SUMS, sums[:, items], strict=True):
        columns[name] = row / FIXED_POINT if name.startswith(("ic_", "w_")) else row
    return pl.DataFrame(columns)


def _slice_sums(part: KeptSlice, weights: FixedWeights) -> np.ndarray:
    """:func:`hieval.engine.icm.slice_item_sums` of a kept slice: the same integer sums, by
    the compiled kernels from as many labels, vectorised below."""
    n_docs = part.end - part.first
    sums = np.zeros((len(ALL_SUMS), n_docs), dtype=np.int64)
    props = slice(len(ITEM_SUMS), len(ITEM_SUMS) + len(PROP_SUMS))
    sums[props.stop :] = part.lca
    if part.labels >= COMPILED_FROM_LABELS:
        from hieval.engine.counts_compiled import item_sums

        for tree in part.tree:
            item_sums(tree.groups(), weights, sums, leaf=False)
        item_sums(part.leaf.groups(), weights, sums, leaf=True)
        return sums
    for kept in part.tree:
        tree = kept.groups()
        xs, ys = tree.pred > 0, tree.gold > 0
        delta, counted = weights.delta[tree.node], weights.counted[tree.node]
        sums[: len(ITEM_SUMS)] += sum_by_doc(
            tree,
            [delta * xs, delta * ys, delta, counted & xs, counted & ys, counted & xs & ys],
            n_docs,
        )
    leaf = part.leaf.groups()
    lx, ly = leaf.pred > 0, leaf.gold > 0
    prop = weights.propensity[leaf.node]
    sums[props] = sum_by_doc(leaf, [prop * lx, prop * ly, prop * (lx & ly)], n_docs)
    return sums
