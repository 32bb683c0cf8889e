"""LCA-F's per-document set sizes compiled (numba), document by document: the same steps as
:func:`hieval.engine.lca.slice_lca_sums`, which stays the reference and the path for small
inputs (importing numba costs a fifth of a second, more than a small input's whole LCA-F).

Why: the vectorised version makes about twenty passes over every (label, ancestor) entry of a
slice and sorts them all; at 100x MIMIC-III (58M entries) that was about a third of
``hieval evaluate``'s CPU time. A document's entries (a few hundred at most) fit in the
caches, so here each document is grouped alone, through a table from (node, side) to group
instead of a sort: about 4x faster.

What bounds these loops is stores, not lookups (measured with ``benchmarks/lca_kernel.py``:
grouping without the table's lookups took as long as with them, while each store taken out of
the per-entry loops paid). So a document's scratch is one group per entry and little per group:
what the entries need of the tree (each chain's node keys and depths, each code's depth and own
node) is laid out once per slice and read from there, each chain deepest first, so that a
label's held entries are a prefix and its LCA search stops where shallower ancestors can be no
nearer; the root check is made per held group when counting; a group's least depth is written
only when it falls; and a label that meets the other side at its own node (an exact hit:
nothing can be nearer or deeper) skips the search for its LCA. Same integers, tested against
the vectorised version (``tests/test_lca_compiled.py``, ``tests/test_lca_kernel.py``).
"""

from __future__ import annotations

import numpy as np

from hieval.compiled import compiled

_DEPTHS = 1 << 10
_NONE = np.iinfo(np.int32).max


def _lca_sums_py(doc, code, pred, anc_ptr, anc_node, depth, is_root, out):
    """Add each document's (predicted, gold, both) augmented set sizes to ``out`` (3 x
    documents); ``doc`` is sorted (a slice's labels are), so a document's labels are a run."""
    chain_key, chain_depth, code_depth, code_own = _chains(anc_ptr, anc_node, depth)
    widest, most = _widest(doc, code, anc_ptr)
    e_group = np.empty(widest, np.int32)  # per entry of a document: its group
    # Per label of a document: its first entry (one more closes the last), the offset from its
    # entries to its chain's, its depth, its own node's group (-1: no chain), kept or dropped.
    l_first = np.empty(most + 1, np.int32)
    l_chain = np.empty(most, np.int64)
    l_depth = np.empty(most, np.int32)
    l_own = np.empty(most, np.int32)
    l_kept = np.empty(most, np.bool_)
    # Per (node, side) group of a document: its key, entries, least depth of the kept labels
    # under it, the same on the other side (its twin's), its twin (-1: none), held.
    g_key = np.empty(widest, np.int32)
    g_size = np.empty(widest, np.int32)
    g_least = np.empty(widest, np.int32)
    g_other = np.empty(widest, np.int32)
    g_twin = np.empty(widest, np.int32)
    g_held = np.empty(widest, np.bool_)
    slot = np.full(2 * depth.size, -1, np.int32)  # per (node, side) key: its group, or -1
    i = 0
    n = code.size
    while i < n:
        j = i
        while j < n and doc[j] == doc[i]:
            j += 1
        groups = _group(
            i, j, code, pred, anc_ptr, chain_key, code_depth, code_own, slot,
            e_group, l_first, l_chain, l_depth, l_own, g_key, g_size,
        )  # fmt: skip
        g_least[:groups] = _DEPTHS
        g_held[:groups] = False
        labels = j - i
        _least(labels, e_group, l_first, l_depth, l_own, l_kept, g_size, g_least)
        _twins(groups, slot, g_key, g_least, g_other, g_twin)
        _hold(labels, e_group, chain_depth, l_first, l_chain, l_depth, l_own, l_kept, g_other,
              g_held)  # fmt: skip
        _count(doc[i], groups, slot, g_key, g_twin, g_held, is_root, out)
        i = j


def _chains(anc_ptr, anc_node, depth):
    """Per code, its chain laid out deepest first (stable: nodes at one depth in ``anc_node``'s
    order), each entry's node's group key on the gold side (the predicted side's is one more)
    and depth; per code, its depth (its deepest node's) and its own node's place in the layout:
    the last at that depth in ``anc_node``'s order (as the vectorised version decides), -1 for
    an empty chain."""
    chain_key = np.empty(anc_node.size, np.int32)
    chain_depth = np.empty(anc_node.size, np.int32)
    n_codes = anc_ptr.size - 1
    code_depth = np.zeros(n_codes, np.int32)
    code_own = np.full(n_codes, -1, np.int32)
    for c in range(n_codes):
        start = anc_ptr[c]
        for q in range(start, anc_ptr[c + 1]):  # insertion sort, deepest first, stable
            key, k = anc_node[q] * 2, depth[anc_node[q]]
            x = q
            while x > start and chain_depth[x - 1] < k:
                chain_key[x] = chain_key[x - 1]
                chain_depth[x] = chain_depth[x - 1]
                x -= 1
            chain_key[x] = key
            chain_depth[x] = k
        if anc_ptr[c + 1] > start:
            code_depth[c] = chain_depth[start]
            own = start
            while own + 1 < anc_ptr[c + 1] and chain_depth[own + 1] == chain_depth[start]:
                own += 1
            code_own[c] = own - start
    return chain_key, chain_depth, code_depth, code_own


def _widest(doc, code, anc_ptr):
    """The most (label, ancestor) entries and the most labels of one document: the scratch
    arrays' sizes."""
    widest, entries, most, labels = 0, 0, 0, 0
    for i in range(code.size):
        if i > 0 and doc[i] != doc[i - 1]:
            entries, labels = 0, 0
        entries += anc_ptr[code[i] + 1] - anc_ptr[code[i]]
        labels += 1
        widest = max(widest, entries)
        most = max(most, labels)
    return widest, most


def _group(  # noqa: PLR0913 (numba: arrays)
    i, j, code, pred, anc_ptr, chain_key, code_depth, code_own, slot,
    e_group, l_first, l_chain, l_depth, l_own, g_key, g_size,
):  # fmt: skip
    """Labels ``i`` to ``j`` - 1's entries (a label's chain adjacent, as the vectorised version
    lists them) grouped by (node, side), groups numbered as first met: no sort, since only a
    group's size, minimum and maximum are taken. Returns the number of groups."""
    groups, e = 0, 0
    for t in range(j - i):
        c = code[i + t]
        side = pred[i + t]
        first = anc_ptr[c]
        l_first[t] = e
        l_chain[t] = first - e
        for q in range(first, anc_ptr[c + 1]):
            key = chain_key[q] + side
            g = slot[key]
            if g < 0:
                g = groups
                slot[key] = g
                g_key[g] = key
                g_size[g] = 1
                groups += 1
            else:
                g_size[g] += 1
            e_group[e] = g
            e += 1
        own = code_own[c]
        l_own[t] = e_group[l_first[t] + own] if own >= 0 else -1
        l_depth[t] = code_depth[c]
    l_first[j - i] = e
    return groups


def _least(labels, e_group, l_first, l_depth, l_own, l_kept, g_size, g_least):
    """Step 1 and the least depths: a label whose own node's group holds another label of its
    set is dropped; each group's least depth of the kept labels under it."""
    for t in range(labels):
        own = l_own[t]
        l_kept[t] = own >= 0 and g_size[own] == 1
        if not l_kept[t]:
            continue
        d = l_depth[t]
        for x in range(l_first[t], l_first[t + 1]):
            g = e_group[x]
            if d < g_least[g]:  # written only when it falls: fewer stores
                g_least[g] = d


def _twins(groups, slot, g_key, g_least, g_other, g_twin):
    """Each group's twin (the same node's other side, -1 if none) and the twin's least depth
    (``_DEPTHS`` if none)."""
    for g in range(groups):
        twin = slot[g_key[g] ^ 1]
        g_twin[g] = twin
        g_other[g] = g_least[twin] if twin >= 0 else _DEPTHS


def _hold(  # noqa: PLR0913 (numba: arrays)
    labels, e_group, chain_depth, l_first, l_chain, l_depth, l_own, l_kept, g_other, g_held
):
    """Steps 2 and 3, label by label: the nearest other-side label through each ancestor, the
    deepest LCA among equals (distance and depth packed into one score; an other-side label
    at the own node's depth under it is distance 0 at the deepest node, so it wins outright);
    then the label's chain up to its LCA is held. A chain is laid out deepest first: through
    an ancestor at depth k a label is at least d - k away, so the search stops once that
    reaches the best distance found (a shallower LCA loses ties), and the held entries are a
    prefix."""
    for t in range(labels):
        if not l_kept[t]:
            continue
        d = l_depth[t]
        lca = d
        at = l_chain[t]
        if g_other[l_own[t]] != d:
            best, reach = _NONE, 4 * _DEPTHS
            for x in range(l_first[t], l_first[t + 1]):
                k = chain_depth[at + x]
                if d - k >= reach:  # shallower ancestors are no nearer, nor deeper
                    break
                other = g_other[e_group[x]]
                if other < _DEPTHS:
                    score = (d - 2 * k + other) * _DEPTHS + _DEPTHS - 1 - k
                    if score < best:
                        best, reach = score, d - 2 * k + other
            lca = d if best >= _NONE else _DEPTHS - 1 - best % _DEPTHS
        for x in range(l_first[t], l_first[t + 1]):
            if chain_depth[at + x] < lca:  # deepest first: the rest is above the LCA
                break
            g_held[e_group[x]] = True


def _count(d, groups, slot, g_key, g_twin, g_held, is_root, out):
    """Step 3's augmented sets, the root left out: their sizes per side and on both sides,
    into document ``d``'s column of ``out``; the slots are left clean for the next document."""
    for g in range(groups):
        key = g_key[g]
        slot[key] = -1
        if not g_held[g] or is_root[key >> 1]:
            continue
        if key & 1:
            out[0, d] += 1
            twin = g_twin[g]
            if twin >= 0 and g_held[twin]:  # the same node: counted alike
                out[2, d] += 1
        else:
            out[1, d] += 1


# Helpers first: each is resolved as compiled when the kernel compiles.
_chains = compiled(_chains)
_widest = compiled(_widest)
_group = compiled(_group)
_least = compiled(_least)
_twins = compiled(_twins)
_hold = compiled(_hold)
_count = compiled(_count)
lca_sums = compiled(_lca_sums_py)


def slice_lca_sums(doc, code, pred, *, space, depth) -> np.ndarray:
    """:data:`hieval.engine.lca.LCA_SUMS` per document of a slice's labels (``doc`` sorted,
    slice-local) over ``space``'s ancestor chains, as a (3, documents) int64 array. The labels
    and chains are handed over as int64, the depths as int32 (as
    :func:`~hieval.engine.lca.node_depths` gives them), so one compiled signature serves all."""
    n_docs = int(doc[-1]) + 1 if doc.size else 0
    out = np.zeros((3, n_docs), dtype=np.int64)
    lca_sums(*_int64(doc, code, pred, space.anc_ptr, space.anc_node),
             np.ascontiguousarray(depth, dtype=np.int32),
             np.ascontiguousarray(space.is_root, dtype=np.bool_), out)  # fmt: skip
    return out


def _int64(*arrays: np.ndarray) -> list[np.ndarray]:
    return [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]


def warm() -> None:
    """Load (or compile) the kernel now, on empty input: called in the background before a
    large count, so that its first slice does not wait for it."""
    empty = np.zeros(0, dtype=np.int64)
    lca_sums(empty, empty, empty, np.zeros(1, dtype=np.int64), empty, np.zeros(0, np.int32),
             np.zeros(0, dtype=np.bool_), np.zeros((3, 0), dtype=np.int64))  # fmt: skip
