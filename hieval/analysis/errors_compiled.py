"""The error analysis's pairing compiled (numba), document by document: the same results as
the vectorised steps of :mod:`hieval.analysis.errors` (which stay the reference and the path
for small inputs: importing numba costs a fifth of a second).

Why: the vectorised version finds each error's nearest error of the other kind with a sorted
search per level and kind, and the near-miss pairs with another search per level, then a
group-by; classifying the sorted keys into misses and wrong codes takes about a dozen passes
over every key. At 100x MIMIC-III (10.8M labels, 3.2M errors) that was about half of the
analysis's 2 CPU-seconds, on the critical path of ``hieval evaluate``. A document's errors
(a few dozen at most) fit in the caches, so here each (miss, wrong code) pair of a document
is compared once over the levels, and the keys are classified in one pass. Same integers,
tested against the vectorised version (``tests/test_errors_compiled.py``).
"""

from __future__ import annotations

import numpy as np

from hieval.compiled import compiled

_FAR = np.iinfo(np.int64).max  # no level in common (yet)


def _unmatched_py(keys, fn, fp):
    """The keys (sorted; repeats count once) whose document's label is on one side only:
    misses (flag bit 0) into ``fn``, wrong codes (flag bit 1) into ``fp``. A key's twin on the
    other side differs from it in the flag bit alone, so it is its neighbour in order.
    Returns how many of each were written."""
    n = keys.size
    n_fn, n_fp = 0, 0
    i = 0
    previous = -1
    while i < n:
        key = keys[i]
        j = i + 1
        while j < n and keys[j] == key:
            j += 1
        matched = (i > 0 and (previous ^ key) == 1) or (j < n and (keys[j] ^ key) == 1)
        if not matched:
            if key & 1:
                fp[n_fp] = key
                n_fp += 1
            else:
                fn[n_fn] = key
                n_fn += 1
        previous = key
        i = j
    return n_fn, n_fp


def _first_shared(node, a, b):
    """The first level (row of ``node``, deepest first) at which codes ``a`` and ``b`` have
    the same node (-1: no node there); ``_FAR`` when none."""
    for at in range(node.shape[0]):
        x = node[at, a]
        if x >= 0 and x == node[at, b]:
            return at
    return _FAR


def _nearest_py(fn_doc, fn_code, fp_doc, fp_code, node, fn_rank, fp_rank):
    """Each error's nearest level (the first level at which it shares a node with an error of
    the other kind of its document) into ``fn_rank`` and ``fp_rank`` (-1: none). Both sides
    are sorted by document."""
    fn_rank[:] = _FAR
    fp_rank[:] = _FAR
    j0 = 0
    for i in range(fn_doc.size):
        d = fn_doc[i]
        while j0 < fp_doc.size and fp_doc[j0] < d:
            j0 += 1
        j = j0
        while j < fp_doc.size and fp_doc[j] == d:
            at = _first_shared(node, fn_code[i], fp_code[j])
            if at < _FAR:
                fn_rank[i] = min(fn_rank[i], at)
                fp_rank[j] = min(fp_rank[j], at)
            j += 1
    for rank in (fn_rank, fp_rank):
        for x in range(rank.size):
            if rank[x] == _FAR:
                rank[x] = -1


def _near_pairs_py(fn_doc, fn_code, fp_doc, fp_code, node, deepest, out, fill):
    """The (miss, wrong code) pairs of a document meeting at level ``deepest`` or before:
    their number, and (with ``fill``) their document, gold code, predicted code and level as
    the rows of ``out``."""
    k = 0
    j0 = 0
    for i in range(fn_doc.size):
        d = fn_doc[i]
        while j0 < fp_doc.size and fp_doc[j0] < d:
            j0 += 1
        j = j0
        while j < fp_doc.size and fp_doc[j] == d:
            at = _first_shared(node, fn_code[i], fp_code[j])
            if at <= deepest:
                if fill:
                    out[0, k] = d
                    out[1, k] = fn_code[i]
                    out[2, k] = fp_code[j]
                    out[3, k] = at
                k += 1
            j += 1
    return k


_first_shared = compiled(_first_shared)  # the helper first: resolved as compiled below
unmatched_kernel = compiled(_unmatched_py)
nearest_kernel = compiled(_nearest_py)
near_pairs_kernel = compiled(_near_pairs_py)


def unmatched(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The miss keys and the wrong-code keys of sorted label ``keys`` (see
    :func:`_unmatched_py`)."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    fn, fp = np.empty(keys.size, np.int64), np.empty(keys.size, np.int64)
    n_fn, n_fp = unmatched_kernel(keys, fn, fp)
    return fn[:n_fn].copy(), fp[:n_fp].copy()


def nearest(
    fn: tuple[np.ndarray, np.ndarray], fp: tuple[np.ndarray, np.ndarray], node: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each miss's and each wrong code's nearest level: a row of ``node`` (levels x codes, -1
    where a code has no node), -1 when none (see :func:`_nearest_py`)."""
    fn_doc, fn_code, fp_doc, fp_code = _int64(*fn, *fp)
    fn_rank, fp_rank = np.empty(fn_doc.size, np.int64), np.empty(fp_doc.size, np.int64)
    nearest_kernel(fn_doc, fn_code, fp_doc, fp_code, node, fn_rank, fp_rank)
    return fn_rank, fp_rank


def near_pairs(
    fn: tuple[np.ndarray, np.ndarray],
    fp: tuple[np.ndarray, np.ndarray],
    node: np.ndarray,
    deepest: int,
) -> np.ndarray:
    """The pairs meeting at level ``deepest`` or before, as the rows document, gold code,
    predicted code and level of a (4, pairs) array: counted, then written."""
    arrays = _int64(*fn, *fp)
    count = near_pairs_kernel(*arrays, node, deepest, np.empty((4, 0), np.int64), False)
    out = np.empty((4, count), np.int64)
    near_pairs_kernel(*arrays, node, deepest, out, True)
    return out


def _int64(*arrays: np.ndarray) -> list[np.ndarray]:
    return [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]


def warm() -> None:
    """Load (or compile) the kernels now, on empty input (the benchmarks' warm-up)."""
    empty = np.zeros(0, dtype=np.int64)
    unmatched(empty)
    nearest((empty, empty), (empty, empty), np.zeros((1, 0), dtype=np.int64))
    near_pairs((empty, empty), (empty, empty), np.zeros((1, 0), dtype=np.int64), 0)
