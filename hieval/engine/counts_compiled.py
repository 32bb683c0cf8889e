"""One level's counts of a slice compiled (numba): the same sums as the vectorised steps of
:func:`hieval.engine.counts.count_slice` (which stay the reference and the path for small
slices: importing numba costs a fifth of a second); and likewise the per-document ICM, HF
and PROP-F sums of :func:`hieval.engine.icm.slice_item_sums`.

Why: per level, the vectorised version clips the groups' counts, takes six ``bincount`` passes
for the node sums and six ``reduceat`` passes for the per-document sums, each over every
(document, node) group; at 100x MIMIC-III that was about a fifth of the count's CPU time. Here
one pass over the groups adds each group to its node and its document. The node sums stay
float64 (as ``bincount`` gives them): integers far below 2^53, so exact in any order. Same
numbers, tested against the vectorised version (``tests/test_counts_compiled.py``).
"""

from __future__ import annotations

import numpy as np

from hieval.compiled import compiled

# Rows of a level's node sums (hieval.engine.counts.NODE_SUMS).
_COPHE_TP, _COPHE_PRED, _COPHE_GOLD, _SET_TP, _SET_PRED, _SET_GOLD = range(6)


def _level_counts_py(doc, node, pred, gold, leaf, sums, per_doc, present, clipped, cophe):  # noqa: PLR0913 (numba: arrays)
    """Add each group (``doc``, ``node``: ``pred`` predicted and ``gold`` gold leaves) to
    ``sums`` (6 x nodes) and, per document, to ``per_doc`` (3 x documents x columns) at column
    ``clipped`` (the flat family at the leaf level, set-based above: counts clipped to 0/1)
    and, above the leaf level, at column ``cophe`` (counts as they are); ``present`` marks the
    (document, column) cells that have a group."""
    for i in range(doc.size):
        d, n, p, g = doc[i], node[i], pred[i], gold[i]
        hp = 1 if p > 0 else 0
        hg = 1 if g > 0 else 0
        both = hp & hg
        sums[_SET_TP, n] += both
        sums[_SET_PRED, n] += hp
        sums[_SET_GOLD, n] += hg
        per_doc[0, d, clipped] += both
        per_doc[1, d, clipped] += hp
        per_doc[2, d, clipped] += hg
        present[d, clipped] = True
        if not leaf:
            least = min(p, g)
            sums[_COPHE_TP, n] += least
            sums[_COPHE_PRED, n] += p
            sums[_COPHE_GOLD, n] += g
            per_doc[0, d, cophe] += least
            per_doc[1, d, cophe] += p
            per_doc[2, d, cophe] += g
            present[d, cophe] = True


def _tree_sums_py(doc, node, pred, gold, delta, counted, sums):
    """ICM's and HF's per-document sums (rows 0-5 of ``sums``: Δ over A(P), A(G) and their
    union, and the counted ancestors of each side and of both) of a part of a slice's tree
    groups, as :func:`hieval.engine.icm.slice_item_sums` sums them."""
    for i in range(doc.size):
        d, n = doc[i], node[i]
        x, y = pred[i] > 0, gold[i] > 0
        w = delta[n]
        if x:
            sums[0, d] += w
        if y:
            sums[1, d] += w
        sums[2, d] += w
        if counted[n]:
            if x:
                sums[3, d] += 1
            if y:
                sums[4, d] += 1
            if x and y:
                sums[5, d] += 1


def _leaf_sums_py(doc, node, pred, gold, propensity, sums):
    """PROP-F's per-document sums (rows 6-8 of ``sums``: inverse propensity of the predicted,
    the gold and the matched codes) of a slice's leaf groups."""
    for i in range(doc.size):
        d = doc[i]
        x, y = pred[i] > 0, gold[i] > 0
        w = propensity[node[i]]
        if x:
            sums[6, d] += w
        if y:
            sums[7, d] += w
        if x and y:
            sums[8, d] += w


def _level_run_count_py(doc, code, node_of):
    """How many groups :func:`_level_runs_py` finds: runs of labels with a node."""
    runs = 0
    last_doc = -1
    last_node = -2
    for i in range(doc.size):
        d = doc[i]
        v = node_of[code[i]]
        runs += ((d != last_doc) | (v != last_node)) & (v >= 0)
        last_doc = d
        last_node = v
    return runs


def _level_runs_py(doc, code, pred, node_of, out):
    """A slice's (document, node) groups at an unbroken level (each node's codes adjacent in
    code order), as :meth:`hieval.engine.groups.Slice._runs` finds them: a group starts
    wherever the document or the node (``node_of[code]``) changes; labels without a node (-1)
    make runs of their own, which are not groups. Writes each group's document, node,
    predicted and gold labels into the columns of ``out`` (4 x (groups + 1): the last column
    takes the runs without a node).

    Without a branch on where a group starts (the data decides it: mispredicted about as often
    as not above the leaves, it cost more than the rest): every label rewrites its group's
    column, the counts start again from zero by a multiplication, and a run without a node
    writes to the spare column."""
    spare = out.shape[1] - 1
    group = -1
    last_doc = -1
    last_node = -2
    n_pred = 0
    n_gold = 0
    for i in range(doc.size):
        d = doc[i]
        v = node_of[code[i]]
        p = pred[i]
        new = (d != last_doc) | (v != last_node)
        named = v >= 0
        group += new & named
        n_pred = n_pred * (1 - new) + p
        n_gold = n_gold * (1 - new) + (1 - p)
        at = group if named else spare
        out[0, at] = d
        out[1, at] = v
        out[2, at] = n_pred
        out[3, at] = n_gold
        last_doc = d
        last_node = v


def _gold_runs_py(keys, doc_shift, low, node_of, per_level, exact):
    """ICM's gold pass over sorted keys, as :func:`hieval.engine.frequencies.gold_frequencies`
    counts it: per level (the rows of ``node_of``, levels x codes), one to ``per_level`` for
    each (document, node) run of the gold labels that have a node there (a label without one
    does not break a run), and one to ``exact`` for each gold (document, code). The predicted
    keys (flag 1) and repeated keys (sorted: a repeat follows its key) are skipped."""
    levels = node_of.shape[0]
    last = np.full(levels, -2, np.int64)
    last_doc = -1
    last_key = -1
    for i in range(keys.size):
        key = keys[i]
        if key & 1 or key == last_key:
            continue
        last_key = key
        doc = key >> doc_shift
        code = (key & low) >> 1
        if doc != last_doc:
            last_doc = doc
            last[:] = -2
        exact[code] += 1
        for level in range(levels):
            node = node_of[level, code]
            if node >= 0 and node != last[level]:
                per_level[level, node] += 1
                last[level] = node


level_counts_kernel = compiled(_level_counts_py)
gold_runs_kernel = compiled(_gold_runs_py)
level_run_count_kernel = compiled(_level_run_count_py)
level_runs_kernel = compiled(_level_runs_py)
tree_sums_kernel = compiled(_tree_sums_py)
leaf_sums_kernel = compiled(_leaf_sums_py)


def level_counts(
    groups,
    *,
    leaf: bool,
    sums: np.ndarray,
    per_doc: np.ndarray,
    present: np.ndarray,
    clipped: int,
    cophe: int,
) -> None:
    """:func:`_level_counts_py` over a level's :class:`hieval.engine.groups.Groups` (every
    array handed over as int64, so one compiled signature serves all)."""
    doc, node, pred, gold = _int64(groups)
    level_counts_kernel(doc, node, pred, gold, leaf, sums, per_doc, present, clipped, cophe)


def level_runs(
    doc: np.ndarray, code: np.ndarray, pred: np.ndarray, node_of: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_level_runs_py`'s groups as four int64 arrays: document, node, predicted and gold
    labels. Two passes over the labels (one counts the groups, so that the arrays are made to
    size) where the vectorised version makes a dozen."""
    arrays = (
        np.ascontiguousarray(doc, dtype=np.int64),
        np.ascontiguousarray(code, dtype=np.int64),
        np.ascontiguousarray(pred, dtype=np.int64),
        np.ascontiguousarray(node_of, dtype=np.int32),
    )
    groups = level_run_count_kernel(arrays[0], arrays[1], arrays[3])
    out = np.empty((4, groups + 1), dtype=np.int64)
    level_runs_kernel(*arrays, out)
    return out[0, :groups], out[1, :groups], out[2, :groups], out[3, :groups]


def item_sums(groups, weights, sums: np.ndarray, *, leaf: bool) -> None:
    """Add a part of a slice's tree groups (or, with ``leaf``, its leaf groups) to the
    per-document item sums ``sums`` (rows of :data:`hieval.engine.icm.ALL_SUMS`), weighed by
    ``weights`` (:class:`hieval.engine.icm.FixedWeights`)."""
    doc, node, pred, gold = _int64(groups)
    if leaf:
        leaf_sums_kernel(doc, node, pred, gold, weights.propensity, sums)
    else:
        tree_sums_kernel(doc, node, pred, gold, weights.delta, weights.counted, sums)


def _int64(groups) -> list[np.ndarray]:
    return [
        np.ascontiguousarray(a, dtype=np.int64)
        for a in (groups.doc, groups.node, groups.pred, groups.gold)
    ]


def warm() -> None:
    """Load (or compile) the kernel now, on empty input (the benchmarks' warm-up)."""
    empty = np.zeros(0, dtype=np.int64)
    level_counts_kernel(empty, empty, empty, empty, True, np.zeros((6, 0)),
                        np.zeros((3, 0, 1), dtype=np.int64), np.zeros((0, 1), dtype=np.bool_),
                        0, 0)  # fmt: skip
    nodes = np.zeros(0, dtype=np.int32)
    gold_runs_kernel(empty, 1, 1, np.zeros((0, 0), dtype=np.int32),
                     np.zeros((0, 0), dtype=np.int64), empty)  # fmt: skip
    level_run_count_kernel(empty, empty, nodes)
    level_runs_kernel(empty, empty, empty, nodes, np.zeros((4, 1), dtype=np.int64))
    sums = np.zeros((9, 0), dtype=np.int64)
    tree_sums_kernel(empty, empty, empty, empty, empty, np.zeros(0, dtype=np.bool_), sums)
    leaf_sums_kernel(empty, empty, empty, empty, empty, sums)
