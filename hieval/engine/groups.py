"""Group-bys over sorted label keys: runs of adjacent keys, not hash tables.

A :class:`Slice` holds the labels of a range of documents (see ``Labels.chunks``)
and computes each level's (document, node) groups once, so the counting and the ICM sums of the
same evaluation share them.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from hieval.engine.keys import CodeSpace, Labels, split_keys
from hieval.errors import InputError


@dataclass(frozen=True)
class Groups:
    """(document, node) groups in a slice of labels, ordered by document (numbered from the
    slice's first document): ``pred`` predicted and ``gold`` gold leaves under the node (the
    CoPHE paper's x and y)."""

    doc: np.ndarray
    node: np.ndarray
    pred: np.ndarray
    gold: np.ndarray

    @cached_property
    def doc_starts(self) -> np.ndarray:
        """Where each document's groups start (computed once, however many sums use it)."""
        return runs(self.doc) if self.doc.size else self.doc[:0]

    def renumbered(self, node: np.ndarray) -> Groups:
        """The same groups under other node numbers, sharing the document runs."""
        other = Groups(self.doc, node, self.pred, self.gold)
        other.__dict__["doc_starts"] = self.doc_starts  # what cached_property stores
        return other


def runs(key: np.ndarray) -> np.ndarray:
    """Start positions of the runs of equal values in ``key`` (non-empty)."""
    return np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))


def group(doc: np.ndarray, node: np.ndarray, pred: np.ndarray, ordered: bool) -> Groups:
    """Group labels by (document, node); ``ordered`` says they are already sorted so.

    Documents are slice-local (below 2^30) and node ids below 2^32: the three fit one key.
    """
    if doc.size and int(doc[-1] if ordered else doc.max()) >= 1 << 30:
        raise InputError("a slice spans 2^30 documents or more; split the input into shards")
    key = (doc << 32) | node
    if not ordered:
        flagged = (key << 1) | pred
        flagged.sort()
        key, pred = flagged >> 1, flagged & 1
    if key.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Groups(empty, empty, empty, empty)
    start = runs(key)
    n_pred = np.add.reduceat(pred, start)
    n_gold = np.diff(np.append(start, key.size)) - n_pred
    first = key[start]
    return Groups(first >> 32, first & 0xFFFFFFFF, n_pred, n_gold)


def sum_by_doc(groups: Groups, values: list[np.ndarray], n_docs: int) -> np.ndarray:
    """Exact integer sums of ``values`` (one per group) per document, as the rows of a
    (len(values), n_docs) array."""
    out = np.zeros((len(values), n_docs), dtype=np.int64)
    if groups.doc.size:
        start = groups.doc_starts
        where = groups.doc[start]
        for row, value in zip(out, values, strict=True):
            row[where] = np.add.reduceat(value.astype(np.int64, copy=False), start)
    return out


#: Labels from which a slice's groups at an unbroken level are found by the compiled pass
#: (:func:`hieval.engine.counts_compiled.level_runs`; the same groups as :meth:`Slice._runs`,
#: which stays the reference and the path for small slices: numba's import costs a fifth of a
#: second). At 100x MIMIC-III the vectorised runs were the count's largest cost (about 1 CPU-s
#: of its 3.5).
COMPILED_RUNS_FROM = 100_000


@dataclass
class Slice:
    """The labels of documents ``first`` to ``end`` - 1, with their groups per level."""

    first: int
    end: int
    keys: np.ndarray
    space: CodeSpace
    _groups: dict[str, Groups] = field(default_factory=dict, repr=False)

    @cached_property
    def _decoded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # Decoded on first use, so in the worker thread that counts the slice.
        doc, code, pred = split_keys(self.keys)
        return doc - self.first, code, pred

    @property
    def doc(self) -> np.ndarray:
        """Slice-local document numbers (0 is the slice's first document)."""
        return self._decoded[0]

    @property
    def code(self) -> np.ndarray:
        return self._decoded[1]

    @property
    def pred(self) -> np.ndarray:
        return self._decoded[2]

    @property
    def n_docs(self) -> int:
        return self.end - self.first

    def groups(self, level: str) -> Groups:
        """(document, ancestor at ``level``) groups; labels without one are left out."""
        if level not in self._groups:
            unbroken = self.space.unbroken and self.space.unbroken[level]
            if unbroken and self.code.size >= COMPILED_RUNS_FROM:
                from hieval.engine.counts_compiled import level_runs  # numba: large slices only

                node_of = self.space.node_of[level]
                self._groups[level] = Groups(*level_runs(self.doc, self.code, self.pred, node_of))
                return self._groups[level]
            node = self.space.node_of[level].take(self.code)
            if unbroken:
                self._groups[level] = self._runs(node)
            else:
                keep = node >= 0
                doc, pred = self.doc, self.pred
                if not keep.all():
                    doc, node, pred = doc[keep], node[keep], pred[keep]
                self._groups[level] = group(doc, node, pred, self.space.contiguous[level])
        return self._groups[level]

    @cached_property
    def _scan(self) -> tuple[np.ndarray, np.ndarray]:
        """Where each document starts, and the running count of predicted labels: what every
        contiguous level's groups are read from."""
        doc = self.doc
        new_doc = np.ones(doc.size, dtype=bool)
        np.not_equal(doc[1:], doc[:-1], out=new_doc[1:])
        predicted = np.zeros(doc.size + 1, dtype=np.int64)
        np.cumsum(self.pred, out=predicted[1:])
        return new_doc, predicted

    def _runs(self, node: np.ndarray) -> Groups:
        """The groups of an unbroken level (each node's codes adjacent in code order): within a
        document, a node's labels are then one run, so a group starts wherever the document or
        the node changes, and its predicted labels are a difference of the running count. Labels
        without a node (-1) form runs of their own, dropped at the end (far fewer groups than
        labels, so cheaper than filtering the labels)."""
        if node.size == 0:
            empty = np.zeros(0, dtype=np.int64)
            return Groups(empty, empty, empty, empty)
        new_doc, predicted = self._scan
        change = np.empty(node.size, dtype=bool)
        change[0] = True
        np.not_equal(node[1:], node[:-1], out=change[1:])
        change |= new_doc
        start = np.flatnonzero(change)
        # A group's predicted labels and length are differences of neighbouring starts (the
        # last one's against the end): one gather of the running count, not two.
        at_start = predicted.take(start)
        n_pred = np.empty(start.size, dtype=np.int64)
        np.subtract(at_start[1:], at_start[:-1], out=n_pred[:-1])
        n_pred[-1] = predicted[-1] - at_start[-1]
        n_gold = np.empty(start.size, dtype=np.int64)
        np.subtract(start[1:], start[:-1], out=n_gold[:-1])
        n_gold[-1] = node.size - start[-1]
        n_gold -= n_pred
        first_node = node.take(start).astype(np.int64)
        first_doc = self.doc.take(start)
        named = first_node >= 0
        if not named.all():
            return Groups(first_doc[named], first_node[named], n_pred[named], n_gold[named])
        return Groups(first_doc, first_node, n_pred, n_gold)

    def tree_groups(self) -> list[Groups]:
        """(document, node) groups over every distinct ancestor of the labels (the whole
        tree, each node once per document): the sets A(P) and A(G) of ICM and HF.

        Node numbers index ``space.tree_nodes``; each part of the list is ordered by document.
        On a regular tree of levels these are the levels' own groups, kept where the node is
        canonical (met there first); otherwise each label is expanded to its distinct ancestors
        and the pairs sorted.
        """
        space = self.space
        if space.tree_slots is not None:
            parts = []
            for level, (canonical, tree_id) in space.tree_slots.items():
                g = self.groups(level)
                if canonical.all():  # the usual level: every group stays
                    parts.append(g.renumbered(tree_id[g.node]))
                    continue
                keep = canonical[g.node]
                parts.append(Groups(g.doc[keep], tree_id[g.node[keep]], g.pred[keep], g.gold[keep]))
            return parts
        code = self.code
        start = space.anc_ptr[code]
        n = space.anc_ptr[code + 1] - start
        total = int(n.sum())
        shift = np.repeat(start - (np.cumsum(n) - n), n)
        node = space.anc_node[shift + np.arange(total)]
        return [group(np.repeat(self.doc, n), node, np.repeat(self.pred, n), ordered=False)]


def slices(labels: Labels) -> Iterator[Slice]:
    """The labels' slices (see :meth:`hieval.engine.keys.Labels.chunks`)."""
    for first, end, keys in labels.chunks():
        yield Slice(first, end, keys, labels.space)


def default_threads() -> int:
    """The cores this process may use (its CPU affinity, not the host's core count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def parallel_map(function: Callable, items: Iterable, threads: int | None) -> Iterator:
    """``map`` over threads, in order, with at most ``2 × threads`` items in flight.

    numpy releases the GIL in its sorts, reductions and element-wise loops, so slices counted
    in threads use every core.
    """
    threads = threads or default_threads()
    if threads == 1:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(threads) as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) >= 2 * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
