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

The confusions' pairs come from the same pass as the nearest levels (a pair meeting at the
category level is one of the pairs compared), as integer keys counted by sorting them
(:func:`pair_counts`), and the misses and wrong codes leave :func:`unmatched` split into
document and code: at 100x, 0.6 CPU-s of the analysis became 0.2 (issue 36; the kernels
against plain-Python references in ``tests/test_errors_kernels.py``).
"""

from __future__ import annotations

import numpy as np

from hieval.compiled import compiled
from hieval.engine.keys import DOC_SHIFT

_FAR = np.iinfo(np.int64).max  # no level in common (yet)


def _unmatched_py(keys, shift, fn_doc, fn_code, fp_doc, fp_code):
    """The labels (sorted keys; repeats count once) on one side of their document only:
    misses (flag bit 0) into ``fn_doc, fn_code``, wrong codes (flag bit 1) into ``fp_doc,
    fp_code``, each key split into its document (the bits from ``shift`` up) and its code
    (the bits between: :func:`hieval.engine.keys.split_keys`). A key's twin on the other
    side differs from it in the flag bit alone, so it is its neighbour in order. Returns how
    many of each were written."""
    low = (1 << shift) - 1
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
                fp_doc[n_fp] = key >> shift
                fp_code[n_fp] = (key & low) >> 1
                n_fp += 1
            else:
                fn_doc[n_fn] = key >> shift
                fn_code[n_fn] = (key & low) >> 1
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


def _nearest_py(  # noqa: PLR0913 (a kernel's arrays, one argument each)
    fn_doc, fn_code, fp_doc, fp_code, node, deepest, fn_rank, fp_rank, keys, start
):
    """Each error's nearest level (the first level at which it shares a node with an error of
    the other kind of its document) into ``fn_rank`` and ``fp_rank`` (``_FAR``: none yet),
    and the (miss, wrong code) pairs meeting at level ``deepest`` or before into ``keys``,
    one integer each, ``gold code * codes + predicted code``: every pair's level is found
    once, for both. Both sides are sorted by document.

    ``start``: the miss, the wrong code and the key to start from (a document's first each);
    returns where it stopped in the same form: at the end of the misses, or before a document
    whose pairs might not fit in ``keys`` (a longer array takes the rest)."""
    codes = node.shape[1]
    i, j, k = start
    while i < fn_doc.size:
        d = fn_doc[i]
        while j < fp_doc.size and fp_doc[j] < d:
            j += 1
        i_end, j_end = i, j
        while i_end < fn_doc.size and fn_doc[i_end] == d:
            i_end += 1
        while j_end < fp_doc.size and fp_doc[j_end] == d:
            j_end += 1
        if k + (i_end - i) * (j_end - j) > keys.size:
            break
        for a in range(i, i_end):
            for b in range(j, j_end):
                at = _first_shared(node, fn_code[a], fp_code[b])
                if at < _FAR:
                    fn_rank[a] = min(fn_rank[a], at)
                    fp_rank[b] = min(fp_rank[b], at)
                    if at <= deepest:
                        keys[k] = fn_code[a] * codes + fp_code[b]
                        k += 1
        i, j = i_end, j_end
    return i, j, k


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


def _pair_runs_py(keys, node, gold, wrong, rank, count):
    """The runs of equal ``keys`` (sorted pair keys of :func:`_nearest_py`): each
    run's gold code, predicted code, their level and its length, into the four arrays;
    returns how many runs."""
    codes = node.shape[1]
    n = 0
    x = 0
    while x < keys.size:
        y = x + 1
        while y < keys.size and keys[y] == keys[x]:
            y += 1
        gold[n] = keys[x] // codes
        wrong[n] = keys[x] % codes
        rank[n] = _first_shared(node, gold[n], wrong[n])
        count[n] = y - x
        n += 1
        x = y
    return n


_first_shared = compiled(_first_shared)  # the helper first: resolved as compiled below
unmatched_kernel = compiled(_unmatched_py)
nearest_kernel = compiled(_nearest_py)
near_pairs_kernel = compiled(_near_pairs_py)
pair_runs_kernel = compiled(_pair_runs_py)


def unmatched(
    keys: np.ndarray,
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The misses and the wrong codes of sorted label ``keys``, each as ``(doc, code)``
    arrays (see :func:`_unmatched_py`)."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    out = [np.empty(keys.size, np.int64) for _ in range(4)]
    n_fn, n_fp = unmatched_kernel(keys, DOC_SHIFT, *out)
    # Cut to their length in place (no copy: the memory past it is given back); each array
    # is this function's own, no view of it shared.
    for values, length in zip(out, (n_fn, n_fn, n_fp, n_fp), strict=True):
        values.resize(length, refcheck=False)
    fn_doc, fn_code, fp_doc, fp_code = out
    return (fn_doc, fn_code), (fp_doc, fp_code)


def nearest(
    fn: tuple[np.ndarray, np.ndarray], fp: tuple[np.ndarray, np.ndarray], node: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each miss's and each wrong code's nearest level: a row of ``node`` (levels x codes, -1
    where a code has no node), -1 when none (see :func:`_nearest_py`)."""
    fn_rank, fp_rank, _ = nearest_and_pair_keys(fn, fp, node, -1)
    return fn_rank, fp_rank


def nearest_and_pair_keys(
    fn: tuple[np.ndarray, np.ndarray],
    fp: tuple[np.ndarray, np.ndarray],
    node: np.ndarray,
    deepest: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`nearest`'s levels and the keys of the pairs meeting at level ``deepest`` or
    before (see :func:`_nearest_py`; any order), found in one pass (the confusions' pairs are
    among the pairs the nearest levels compare)."""
    fn_doc, fn_code, fp_doc, fp_code = _int64(*fn, *fp)
    fn_rank, fp_rank = np.full(fn_doc.size, _FAR), np.full(fp_doc.size, _FAR)
    keys = np.empty(max(1024, fn_doc.size), np.int64)
    at = (0, 0, 0)
    while True:
        at = nearest_kernel(
            fn_doc, fn_code, fp_doc, fp_code, node, deepest, fn_rank, fp_rank, keys, at
        )
        if at[0] == fn_doc.size:
            break
        longer = np.empty(2 * keys.size, np.int64)  # rarely: twice as long, until it fits
        longer[: at[2]] = keys[: at[2]]
        keys = longer
    for rank in (fn_rank, fp_rank):
        rank[rank == _FAR] = -1
    keys.resize(at[2], refcheck=False)  # in place, no copy: the array is this function's own
    return fn_rank, fp_rank, keys


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


def near_pair_counts(
    fn: tuple[np.ndarray, np.ndarray],
    fp: tuple[np.ndarray, np.ndarray],
    node: np.ndarray,
    deepest: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Gold code, predicted code, level and number of documents of each distinct pair
    meeting at level ``deepest`` or before, in order of gold code, then predicted code
    (:func:`pair_counts` of :func:`nearest_and_pair_keys`)."""
    return pair_counts(nearest_and_pair_keys(fn, fp, node, deepest)[2], node)


def pair_counts(
    keys: np.ndarray, node: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Gold code, predicted code, level and number of documents of each distinct pair of
    pair ``keys`` (:func:`nearest_and_pair_keys`), in order of gold code, then predicted code.

    A document holds each pair once (its misses and its wrong codes are distinct codes), so a
    pair's number of documents is its number of occurrences: the keys are counted as runs of
    their sorted values (NumPy sorts a million integers in milliseconds; a frame of the pairs
    and a group-by took twenty times as long)."""
    keys = np.sort(keys)
    runs = [np.empty(keys.size, np.int64) for _ in range(4)]
    n = pair_runs_kernel(keys, node, *runs)
    return tuple(run[:n] for run in runs)


def _int64(*arrays: np.ndarray) -> list[np.ndarray]:
    return [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]


def warm() -> None:
    """Load (or compile) the kernels now, on empty input (the benchmarks' warm-up)."""
    empty = np.zeros(0, dtype=np.int64)
    unmatched(empty)
    nearest((empty, empty), (empty, empty), np.zeros((1, 0), dtype=np.int64))
    near_pairs((empty, empty), (empty, empty), np.zeros((1, 0), dtype=np.int64), 0)
    near_pair_counts((empty, empty), (empty, empty), np.zeros((1, 0), dtype=np.int64), 0)
