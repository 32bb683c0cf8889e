"""Exact partial sums of many rows, compiled: what :func:`hieval.metrics.arithmetic.exact_parts`
computes, for the bootstrap's replicates × nodes arrays.

Why compiled: every bootstrap replicate sums each per-node measure (P, R, F1, F2, the
per-label suite metrics) over a level's nodes, correctly rounded, so that the all-ones
replicate is the reported value bit for bit. In numpy the error-free slicing takes about fifteen
passes over each array (bounds, a copy, three operations and a sum per grid, a bound per grid)
and made the bootstrap about 16-40 % slower than the plain sums it replaced. Here a row is read
twice: once for its largest magnitude (an integer maximum of the bits without the sign, which
also finds NaN, infinities and huge terms), once to cut each term into three slices on fixed
grids below that bound and add each grid's slices up, exactly.

The arithmetic is :mod:`hieval.metrics.arithmetic`'s (Rump, Ogita and Oishi's extraction,
``_slice_bits``' grid width), with the grids fixed in advance: grid k has step
2**(e − k·bits) where 2**e bounds the row, and a remainder after grid k is at most half its
step, below the next grid's bound. A grid's slices are integers of at most 2**bits steps, so
any sum of a row's slices stays below 2**53 steps: exact in any order (the compiled sum may
reorder it). Three grids hold every term of the 3·bits − 53 binades below a row's largest
exactly (64 binades for 8,000 terms, 43 for a million): a ratio of counts is never that far
below the largest of its row. A row with a remainder after three grids, a term that is not
finite or is huge, or a bound so small that the grids would be subnormal is left to
:func:`~hieval.metrics.arithmetic.exact_parts` (tests/test_exact_rows.py covers each case).
"""

from __future__ import annotations

import math

import numpy as np

from hieval.compiled import compiled
from hieval.metrics.arithmetic import _HUGE, _slice_bits, exact_parts

#: The bits of a float64 without its sign, and of the largest magnitude sliced here: a row whose
#: largest |term|'s bits exceed ``_HUGE_BITS`` holds a huge term, an infinity or a NaN.
_MAGNITUDE = np.uint64(0x7FFFFFFFFFFFFFFF)
_HUGE_BITS = np.uint64(np.float64(_HUGE).view(np.uint64))
#: Terms sliced per chunk: the slices are written to small buffers the compiled sums read
#: while they are in cache.
_CHUNK = 256
#: A row left to :func:`exact_parts` (remainder after three grids, subnormal grids), or special
#: (a NaN, an infinity or a huge term: :func:`exact_parts` gives it one part).
_LEFT, _SPECIAL = 1, 2


def _total_py(buffer: np.ndarray, count: int) -> float:  # pragma: no cover - compiled
    """Σ buffer[:count] in any order (``reassoc``: vectorised): the terms are exact slices on
    one grid, or non-negative remainders only compared with 0."""
    total = 0.0
    for j in range(count):
        total += buffer[j]
    return total


_total = compiled(_total_py, fastmath={"reassoc", "nsz"})


def _top_bits_py(bits: np.ndarray) -> np.uint64:  # pragma: no cover - compiled
    """The largest of a row's bit patterns without their sign: its largest magnitude's bits (an
    integer maximum, vectorised; a NaN's bits are above every number's)."""
    top = np.uint64(0)
    for j in range(bits.size):
        magnitude = bits[j] & _MAGNITUDE
        top = magnitude if magnitude > top else top
    return top


_top_bits = compiled(_top_bits_py)


def _row_parts_py(
    rows: np.ndarray, row_bits: np.ndarray, bits: int, out: np.ndarray, left: np.ndarray
) -> None:  # pragma: no cover - compiled; tested through row_parts
    """Per row of ``rows`` (``row_bits``: the same memory as unsigned integers), the exact sums
    of its slices on three grids into ``out[row, 0:3]``; ``left[row]`` flags a row this cannot
    sum exactly (its ``out`` is then meaningless)."""
    n_rows, n = rows.shape
    s0, s1, s2, s3 = np.empty(_CHUNK), np.empty(_CHUNK), np.empty(_CHUNK), np.empty(_CHUNK)
    for i in range(n_rows):
        top = _top_bits(row_bits[i])
        if top > _HUGE_BITS:
            left[i] = _SPECIAL
            continue
        if top == 0:  # every term ±0: parts 0, as exact_parts gives
            continue
        biased = int(top >> np.uint64(52))
        e = biased - 1022  # 2**(e − 1) <= max |term| < 2**e (frexp's exponent)
        if biased == 0 or e - 3 * bits + 52 < -1000:  # subnormal bound or grids
            left[i] = _LEFT
            continue
        # Adding and subtracting 1.5 · 2**(e_k − bits + 52) rounds a term below 2**e_k to
        # the grid 2**(e_k − bits); the remainder is exact (arithmetic._extract).
        c0 = math.ldexp(1.5, e - bits + 52)
        c1 = math.ldexp(1.5, e - 2 * bits + 52)
        c2 = math.ldexp(1.5, e - 3 * bits + 52)
        row = rows[i]
        a0 = a1 = a2 = rest = 0.0
        for first in range(0, n, _CHUNK):
            count = min(n, first + _CHUNK) - first
            for j in range(count):
                x = row[first + j]
                p = (x + c0) - c0
                r = x - p
                q = (r + c1) - c1
                r = r - q
                t = (r + c2) - c2
                s0[j], s1[j], s2[j], s3[j] = p, q, t, abs(r - t)
            a0 += _total(s0, count)
            a1 += _total(s1, count)
            a2 += _total(s2, count)
            rest += _total(s3, count)
        out[i, 0], out[i, 1], out[i, 2] = a0, a1, a2
        if rest != 0.0:
            left[i] = _LEFT


_row_parts = compiled(_row_parts_py)


def _column_parts_py(
    columns: np.ndarray, column_bits: np.ndarray, bits: int, out: np.ndarray, left: np.ndarray
) -> None:  # pragma: no cover - compiled; tested through row_parts
    """:func:`_row_parts_py` for the rows of ``columns.T``: terms × rows in memory, as the
    bootstrap's replicates × nodes arrays are (a sparse product's result, transposed). Term by
    term, every row's slices are added at once (independent lanes: vectorised as they are)."""
    n, n_rows = columns.shape
    top = np.zeros(n_rows, dtype=np.uint64)
    for j in range(n):
        for i in range(n_rows):
            magnitude = column_bits[j, i] & _MAGNITUDE
            top[i] = magnitude if magnitude > top[i] else top[i]
    c0, c1, c2 = np.zeros(n_rows), np.zeros(n_rows), np.zeros(n_rows)
    for i in range(n_rows):
        biased = int(top[i] >> np.uint64(52))
        e = biased - 1022
        if top[i] > _HUGE_BITS:
            left[i] = _SPECIAL
        elif top[i] != 0 and (biased == 0 or e - 3 * bits + 52 < -1000):
            left[i] = _LEFT
        elif top[i] != 0:  # else c = 0: terms pass whole into part 0, all ±0 or not used
            c0[i] = math.ldexp(1.5, e - bits + 52)
            c1[i] = math.ldexp(1.5, e - 2 * bits + 52)
            c2[i] = math.ldexp(1.5, e - 3 * bits + 52)
    a0, a1, a2, rest = np.zeros(n_rows), np.zeros(n_rows), np.zeros(n_rows), np.zeros(n_rows)
    for j in range(n):
        for i in range(n_rows):
            x = columns[j, i]
            p = (x + c0[i]) - c0[i]
            r = x - p
            q = (r + c1[i]) - c1[i]
            r = r - q
            t = (r + c2[i]) - c2[i]
            a0[i] += p
            a1[i] += q
            a2[i] += t
            rest[i] += abs(r - t)
    for i in range(n_rows):
        if top[i] == 0:
            continue
        out[i, 0], out[i, 1], out[i, 2] = a0[i], a1[i], a2[i]
        if rest[i] != 0.0 and left[i] == 0:
            left[i] = _LEFT


_column_parts = compiled(_column_parts_py)


def row_parts(values: np.ndarray, plus: np.ndarray | None = None) -> np.ndarray:
    """:func:`hieval.metrics.arithmetic.exact_parts`, compiled: exact partial sums over the last
    axis of ``values`` (and ``plus``, one more term per row), shape ``values.shape[:-1] +
    (parts,)``, whose :func:`~hieval.metrics.arithmetic.round_parts` is the correctly rounded
    sum (the same number as ``exact_parts``', which rows this cannot slice are given to)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0:
        raise ValueError("exact sums run over the last axis of an array")
    out_shape = values.shape[:-1]
    first = int(plus is not None)
    bits = _slice_bits(values.shape[-1] + first)
    # One compiled signature per kernel (contiguous arrays only): each costs a compilation.
    if values.ndim == 2 and values.T.flags.c_contiguous and not values.flags.c_contiguous:
        rows = values  # replicates × nodes, node-major in memory: summed as it lies
        sliced = np.zeros((len(rows), 3))
        left = np.zeros(len(rows), dtype=np.int8)
        _column_parts(rows.T, rows.T.view(np.uint64), bits, sliced, left)
    else:
        rows = np.ascontiguousarray(values.reshape(math.prod(out_shape), values.shape[-1]))
        sliced = np.zeros((len(rows), 3))
        left = np.zeros(len(rows), dtype=np.int8)
        _row_parts(rows, rows.view(np.uint64), bits, sliced, left)
    out, extra = sliced, None
    if plus is not None:
        extra = np.broadcast_to(np.asarray(plus, dtype=np.float64), out_shape).reshape(-1)
        out = np.column_stack([extra, sliced])
        left[~np.isfinite(extra)] = _SPECIAL
    slow = np.flatnonzero(left)
    if len(slow):
        parts = exact_parts(rows[slow], None if extra is None else extra[slow])
        if parts.shape[-1] > out.shape[-1]:
            out = np.pad(out, ((0, 0), (0, parts.shape[-1] - out.shape[-1])))
        out[slow] = 0.0
        out[slow, : parts.shape[-1]] = parts
    return out.reshape(*out_shape, out.shape[-1])
