"""LCA-F's per-document set sizes (Kosmopoulos et al. 2015), vectorised over a slice's labels.

LCA-P, LCA-R and LCA-F compare a document's predicted set Ŷ and gold set Y after augmenting
each label with its ancestors only up to the lowest common ancestor (LCA) it shares with its
nearest label on the other side, not up to the root as the hierarchical F (HF) does: a
sibling of the gold code then earns its parent, and a code of another chapter earns nothing
near the gold. On a tree the distance between codes p and g is
depth(p) + depth(g) − 2·depth(lca(p, g)). Per document:

1. a label that is an ancestor of another label of the same set is dropped (as BioASQ's
   HEMKit does): the deeper label says more;
2. each remaining label is paired with its nearest label(s) on the other side; among equally
   near partners the one with the deepest LCA wins (the smallest augmentation, see below);
3. Ŷ⁺ is every predicted label with its ancestors up to and including its LCA, Y⁺ likewise;
   the root is never counted (as in HF and the set-based family): two codes that meet only
   at the root share nothing. A label with no partner (the other side empty) is its own
   augmented set. Codes placed nowhere in the tree (``unknown_codes: count``) are left out,
   as ICM, HF and PROP-F leave them: they have no depth and no ancestors.

The sizes |Ŷ⁺|, |Y⁺| and |Ŷ⁺ ∩ Y⁺| are integers per document, additive like the other item
sums; LCA-F per document is 2|Ŷ⁺ ∩ Y⁺| / (|Ŷ⁺| + |Y⁺|) (:mod:`hieval.metrics.suite`).

The nearest partner needs no pairs of labels: for a label at depth D and each of its
ancestors a at depth k, the nearest other-side label through a is D − 2k + (the least depth of
the other side's labels under a), a (document, node, side) group-by of the slice's
ancestor-expanded labels, one sort of integer keys. Through the true LCA this is the exact
distance; through any higher ancestor it is no shorter, so the minimum over ancestors is the
distance and its deepest minimiser the LCA.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import polars as pl

from hieval.collector import background_paused
from hieval.engine.groups import Slice
from hieval.engine.keys import CodeSpace

#: The per-document sizes, in the order of :func:`slice_lca_sums`'s rows.
LCA_SUMS = ("lca_pred", "lca_gold", "lca_both")
#: Labels of a slice from which LCA-F's compiled kernel is used: below, numba's import and the
#: kernel's loading (about half a second) cost more than the kernel saves (about 80 ms per
#: slice of 262,144 labels at 100x MIMIC-III against the vectorised version's 110 ms).
COMPILED_FROM_LABELS = 100_000
#: A depth bound for the packed (distance, depth) score: hierarchies are far shallower.
_DEPTHS = 1 << 10
_NONE = np.iinfo(np.int32).max


def node_depths(space: CodeSpace) -> np.ndarray:
    """Per tree node (``space.tree_nodes``), its depth: the root 0, its children 1, and so on.

    A node's depth is the number of distinct nodes above it on its code's chain. The chain
    is ordered by the level each node is first met at, deepest first (a code listed as its own
    ancestor at several levels is one node); on a tree every code under a node gives the node
    the same depth (the least is kept otherwise).
    """
    n_nodes = space.tree_nodes.len()
    if n_nodes == 0:
        return np.zeros(0, dtype=np.int32)
    rank = {level: i for i, level in enumerate(space.levels)}
    chains = (
        space.ancestors.select(
            "code", "ancestor", pl.col("level").replace_strict(rank, return_dtype=pl.Int64)
        )
        .group_by("code", "ancestor")
        .agg(pl.col("level").min().alias("first"))
        .sort("code", "first", descending=[False, True])
        .with_columns(pl.int_range(pl.len()).over("code").alias("depth"))
        .group_by("ancestor")
        .agg(pl.col("depth").min())
    )
    index = space.tree_nodes.search_sorted(chains["ancestor"]).to_numpy()
    depth = np.zeros(n_nodes, dtype=np.int32)
    depth[index] = chains["depth"].to_numpy()
    return depth


def prefetch_compiled() -> threading.Thread:
    """Import and load the compiled kernel (:mod:`hieval.engine.lca_compiled`) in a background
    thread, for a count large enough to use it: numba's import and the kernel's cached
    machine code take about half a second, spent while the labels are read and encoded."""

    def load() -> None:
        # numba's import makes objects that all live on (hieval.collector: paused in a
        # command-line process); a failure is left for the count's own import to meet and
        # report, not printed from this thread.
        with contextlib.suppress(Exception), background_paused():
            from hieval.engine.counts_compiled import warm as warm_counts
            from hieval.engine.lca_compiled import warm

            warm()
            warm_counts()  # the per-level counts' kernel, compiled from as many labels

    thread = threading.Thread(target=load, name="lca-kernel", daemon=True)
    thread.start()
    return thread


def slice_lca_sums(part: Slice, depth: np.ndarray) -> np.ndarray:
    """:data:`LCA_SUMS` per document of a slice, as the rows of a (3, documents) int64 array.

    A slice of :data:`COMPILED_FROM_LABELS` labels or more is summed by the compiled kernel
    (the same steps, document by document: about 4x faster); a smaller one here, vectorised."""
    if part.code.size >= COMPILED_FROM_LABELS:
        from hieval.engine.lca_compiled import slice_lca_sums as compiled

        out = compiled(part.doc, part.code, part.pred, space=part.space, depth=depth)
        if out.shape[1] < part.n_docs:  # documents without labels close the slice
            out = np.pad(out, ((0, 0), (0, part.n_docs - out.shape[1])))
        return out
    return vectorised_lca_sums(part, depth)


def vectorised_lca_sums(part: Slice, depth: np.ndarray) -> np.ndarray:
    """:func:`slice_lca_sums` in numpy, over every (label, ancestor) entry of the slice at once:
    the reference the compiled kernel is tested against, and the path for small slices."""
    out = np.zeros((len(LCA_SUMS), part.n_docs), dtype=np.int64)
    space = part.space
    doc, code, pred = part.doc, part.code, part.pred
    if code.size == 0:
        return out
    start = space.anc_ptr[code]
    n = space.anc_ptr[code + 1] - start
    treed = np.flatnonzero(n > 0)  # codes placed nowhere are left out, as HF leaves them
    if treed.size == 0:
        return out
    n = n[treed]
    # One entry per (label, ancestor), the entries of a label adjacent.
    label = np.repeat(np.arange(treed.size, dtype=np.int32), n)
    first = np.cumsum(n) - n
    node = space.anc_node[_chain_positions(start[treed], n, first)]
    k = depth[node]
    label_depth = np.maximum.reduceat(k, first)
    depth_of = np.repeat(label_depth, n)  # per entry, its label's depth
    own = k == depth_of  # the label's own node (the deepest of its chain)
    key = np.repeat(_group_keys(doc[treed], pred[treed], space.tree_nodes.len()), n)
    key |= node << 1
    order, sorted_key = _sort(key)
    change = np.empty(key.size, dtype=bool)
    change[0] = True
    np.not_equal(sorted_key[1:], sorted_key[:-1], out=change[1:])
    starts = np.flatnonzero(change)
    group_key = sorted_key[starts]
    group = np.empty(key.size, dtype=np.int32)
    group[order] = np.cumsum(change, dtype=np.int32)
    group -= 1
    size = np.diff(np.append(starts, key.size))
    twin = _twins(group_key)

    # 1. A label with another label of its set under it is dropped.
    dropped = np.zeros(treed.size, dtype=bool)
    dropped[label[own]] = size[group[own]] > 1
    kept = np.repeat(~dropped, n)
    # 2. The nearest other-side label through each ancestor, and each label's LCA depth.
    least = np.minimum.reduceat(np.where(kept, depth_of, _DEPTHS)[order], starts)
    other_depth = np.where(twin >= 0, least[twin], _DEPTHS)[group]
    partnered = kept & (other_depth < _DEPTHS)
    distance = depth_of - 2 * k + other_depth
    score = np.where(partnered, distance * _DEPTHS + (_DEPTHS - 1 - k), _NONE)
    best = np.minimum.reduceat(score, first)
    lca_depth = np.where(best < _NONE, _DEPTHS - 1 - best % _DEPTHS, label_depth)
    # 3. The augmented sets: each kept label's chain up to its LCA, the root left out.
    inside = kept & (k >= np.repeat(lca_depth, n)) & ~space.is_root[node]
    held = np.maximum.reduceat(inside[order].astype(np.int8), starts) > 0
    group_doc = group_key >> (_node_bits(space.tree_nodes.len()) + 1)
    is_pred = group_key & 1
    both = held & (is_pred == 1) & (twin >= 0) & held[twin]
    # held groups by (document, side): gold at even, predicted at odd positions
    sides = np.bincount((group_doc[held] << 1) | is_pred[held], minlength=2 * part.n_docs)
    out[0] += sides[1::2]
    out[1] += sides[0::2]
    out[2] += np.bincount(group_doc[both], minlength=part.n_docs)
    return out


def _chain_positions(start: np.ndarray, n: np.ndarray, first: np.ndarray) -> np.ndarray:
    """``start[i] + j`` for ``j < n[i]``, label after label (each label's ancestor chain in
    ``anc_node``), as one running sum: +1 within a chain, a jump between chains."""
    step = np.ones(int(first[-1] + n[-1]), dtype=np.int64)
    step[0] = start[0]
    step[first[1:]] = start[1:] - (start[:-1] + n[:-1] - 1)
    return np.cumsum(step, out=step)


def _sort(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order that sorts ``key`` (non-negative) and the sorted keys. Ties may come in any
    order: every use is a group's minimum, maximum or count. Where key and position fit one
    int64 together they are sorted as one (a plain sort, about 4x faster than an argsort)."""
    if key.size == 0:
        return np.zeros(0, dtype=np.int64), key
    shift = max(int(key.size - 1).bit_length(), 1)
    if int(key.max()).bit_length() + shift > 63:
        order = np.argsort(key)
        return order, key[order]
    packed = key << shift
    packed |= np.arange(key.size, dtype=np.int64)
    packed.sort()
    return packed & ((1 << shift) - 1), packed >> shift


def _node_bits(n_nodes: int) -> int:
    return max(int(n_nodes).bit_length(), 1)


def _group_keys(doc: np.ndarray, side: np.ndarray, n_nodes: int) -> np.ndarray:
    """Per label, its (document, side) part of the (document, node, side) keys, packed into
    one int64 (slice documents are below 2^30); a node n is added as ``n << 1``."""
    bits = _node_bits(n_nodes)
    if bits + 31 > 62:
        raise ValueError(f"{n_nodes} tree nodes do not fit LCA-F's keys")
    return (doc.astype(np.int64) << (bits + 1)) | side


def _twins(group_key: np.ndarray) -> np.ndarray:
    """Per (document, node, side) group, the position of the same (document, node) on the
    other side, -1 where that side has no label under the node. Keys are sorted and differ
    only in their last bit there, so a twin is a neighbour: no search."""
    twin = np.full(group_key.size, -1, dtype=np.int64)
    pair = np.flatnonzero(group_key[1:] == (group_key[:-1] ^ 1))  # gold at i, predicted at i+1
    twin[pair], twin[pair + 1] = pair + 1, pair
    return twin
