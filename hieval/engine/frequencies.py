"""ICM's gold pass over encoded labels as runs of sorted keys: per tree node, the gold
documents with the node in A(G); per code, the gold documents holding the code itself.

Why: the general path (:func:`hieval.engine.icm.slice_frequencies`) builds every level's
(document, node) groups of the gold, then counts them, and was an eighth of a 100× evaluation
(0.93 s for 5.4M gold labels). The counts need no groups: on a tree of levels whose nodes hold
contiguous runs of codes, a document's labels, sorted by code, meet each node of a level in one
run, so a (document, node) pair is a key where the document or the level's node changes (among
the keys with a node there), and one ``bincount`` of those keys' nodes counts them (0.2 s).
Graphs whose levels are not runs of codes keep the general path (tests/test_gold_frequencies.py
checks both against each other and against a plain-Python count).
"""

from __future__ import annotations

import numpy as np

from hieval.engine.keys import _LOW, DOC_SHIFT, Labels

#: Keys read at a time (cut between documents): a few temporaries of this length, small enough
#: to stay in cache (100x gold: 0.23 s against 0.31 s with 2^21).
CHUNK_KEYS = 1 << 18


def _count_runs(doc: np.ndarray, node: np.ndarray, counts: np.ndarray) -> None:
    """Add to ``counts`` one per (document, node) run of the labels that have a node.

    Labels without one (-1) are dropped first: a document's codes can meet a node, then a code
    outside it with no node at the level, then the node again (a level's contiguity ignores
    codes without a node there), and that is still one pair.
    """
    keep = node >= 0
    if not keep.all():
        doc, node = doc[keep], node[keep]
    if node.size == 0:
        return
    starts = np.empty(node.size, dtype=bool)
    starts[0] = True
    np.not_equal(doc[1:], doc[:-1], out=starts[1:])
    starts[1:] |= node[1:] != node[:-1]
    counts += np.bincount(node[starts], minlength=counts.size)


def gold_frequencies(labels: Labels) -> tuple[np.ndarray, np.ndarray] | None:
    """``(per tree node, per code)`` gold document counts, as
    :func:`hieval.engine.icm.slice_frequencies` summed over every slice; None where runs do
    not apply (no level slots, or a level whose nodes' codes are not contiguous)."""
    space = labels.space
    if space.tree_slots is None or not all(space.contiguous[lv] for lv in space.tree_slots):
        return None
    if labels.keys.size >= COMPILED_FROM:
        per_level, exact = _compiled_counts(labels)
    else:
        per_level, exact = _counts(labels)
    freq = np.zeros(space.tree_nodes.len(), dtype=np.int64)
    for level, (canonical, tree_id) in space.tree_slots.items():
        np.add.at(freq, tree_id[canonical], per_level[level][canonical])
    return freq, exact


#: Labels from which the gold pass is one compiled pass over the keys
#: (:func:`hieval.engine.counts_compiled.gold_runs_kernel`: every level of a label at once)
#: instead of a few vectorised passes per level and chunk (0.3 CPU-s at 100x MIMIC-III);
#: below, numba's import would cost more than it saves.
COMPILED_FROM = 100_000


def _compiled_counts(labels: Labels) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per level its nodes' gold document counts, and per code its own, in one pass."""
    from hieval.engine.counts_compiled import gold_runs_kernel  # numba: large inputs only

    space = labels.space
    levels = list(space.tree_slots)
    node_of = np.empty((len(levels), space.codes.len()), dtype=np.int32)
    for row, level in enumerate(levels):
        node_of[row] = space.node_of[level]
    widths = [space.nodes[level].len() for level in levels]
    per_level = np.zeros((len(levels), max(widths, default=0)), dtype=np.int64)
    exact = np.zeros(space.codes.len(), dtype=np.int64)
    keys = np.ascontiguousarray(labels.keys, dtype=np.int64)
    gold_runs_kernel(keys, DOC_SHIFT, _LOW, node_of, per_level, exact)
    return {
        level: per_level[i, :width]
        for i, (level, width) in enumerate(zip(levels, widths, strict=True))
    }, exact


def _counts(labels: Labels) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """:func:`_compiled_counts`, vectorised chunk by chunk (the reference)."""
    space = labels.space
    per_level = {lv: np.zeros(space.nodes[lv].len(), dtype=np.int64) for lv in space.tree_slots}
    exact = np.zeros(space.codes.len(), dtype=np.int64)
    for _, _, keys in labels.chunks(CHUNK_KEYS):
        keys = keys[(keys & 1) == 0]  # the gold: ICM's weights never depend on a model
        if keys.size == 0:
            continue
        doc, code = keys >> DOC_SHIFT, (keys & _LOW) >> 1
        _count_runs(doc, code, exact)
        for level, counts in per_level.items():
            _count_runs(doc, space.node_of[level][code], counts)
    return per_level, exact
