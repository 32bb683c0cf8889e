"""The two pieces of arithmetic every metric shares: a ratio with a declared value where its
denominator is 0, and a mean that does not depend on the order of its terms.

Metrics differ in what a 0 denominator means (P/R/F 0 by convention, the example-based
measures 1 -- nothing to find and nothing found --, a bootstrap replicate NaN -- it drew
nothing of the row); they should not differ in how the division is done, so that the reported
value and a replicate run the same float64 operations. Written once here.
"""

from __future__ import annotations

import contextlib
import math
import threading

import numpy as np
import polars as pl


def divide(num, den, *, zero_division: float = 0.0):
    """``num / den``, ``zero_division`` where ``den`` is not positive.

    On numpy arrays (shapes broadcast: the bootstrap evaluates a formula on units x
    replicates at once) or on Polars expressions (the tidy table's per-node values); the result
    is float64 either way.
    """
    if isinstance(num, pl.Expr) or isinstance(den, pl.Expr):
        return pl.when(den > 0).then(num / den).otherwise(zero_division)
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    # Divide everywhere, then select: where den > 0 the same IEEE quotient as dividing only
    # there, elsewhere ``zero_division``. ``np.divide(..., where=den > 0)`` gives the same bits
    # but runs numpy's masked loop, 10-20x slower than an unmasked divide and a select: on the
    # bootstrap's replicates x nodes arrays it was the largest cost of a replicate. No warning
    # for the quotients thrown away (x/0, 0/0, x/tiny negative), nor for an infinite one kept.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        quotient = np.divide(num, den)
    return np.where(den > 0, quotient, zero_division if zero_division != 0 else 0.0)


def exact_mean(values) -> float:
    """Mean with a correctly rounded sum (``math.fsum``); 0 for no values.

    A parallel group-by sums floats in an order that varies between runs, which changes the last
    bits of a mean; the correctly rounded sum does not depend on order, so reports regenerate
    bit for bit.
    """
    if isinstance(values, np.ndarray) and values.dtype == np.float64 and values.ndim == 1:
        # The same correctly rounded sum, vectorised (:func:`exact_sum`): ``math.fsum`` of a
        # 337,200-item list (with its ``tolist``) took 17 ms, a metric's mean at 100x MIMIC-III.
        # A sum that is not finite (an infinite or NaN term, or an overflow, where fsum raises)
        # is left to fsum below, so that such a mean behaves exactly as it always did.
        total = float(exact_sum(values[None, :])[0]) if values.size else 0.0
        if math.isfinite(total):
            return total / values.size if values.size else 0.0
    values = list(values)
    return math.fsum(values) / len(values) if values else 0.0


# -- correctly rounded sums of many rows at once -----------------------------------------------
#
# The reported means are correctly rounded (``exact_mean``); a replicate is the same mean with
# a weight per document, so its sums must be correctly rounded too, or the all-ones replicate
# differs from the reported value in its last bits. ``math.fsum`` per replicate would cost a
# Python loop over 1,000 replicates × thousands of terms; instead each term is split into
# slices on a common grid (Rump, Ogita and Oishi's error-free extraction) so coarse that any
# sum of the slices is exact in float64, whatever order numpy or BLAS adds them in. Each
# term's remainder below the grid is sliced again on a finer grid, until nothing is left
# (two or three grids for metric values; each grid takes ~40 bits off the widest remainder,
# so at most ~60 for any finite data). A sum is then a few exact partial sums ("parts", padded
# with zeros), which ``math.fsum`` adds; parts of several sums concatenate into the parts of
# their total, still exact (the ``overall`` rows pool the levels' node sums so).

#: Terms of magnitude beyond this are summed by ``math.fsum`` (the grid constant would overflow).
_HUGE = 2.0**900


def _slice_bits(mass: float) -> int:
    """Bits per slice such that a sum whose |weights| add up to ``mass`` of slices on one grid
    (each at most 2**bits grid steps) stays below 2**53 steps: exact."""
    return min(50, 52 - math.ceil(math.log2(max(mass, 1.0))))


def _extract(rest: np.ndarray, top: np.ndarray, bits: int, out: np.ndarray) -> np.ndarray:
    """``rest`` rounded to the grid 2**(e − bits), where 2**e bounds ``top`` (broadcast
    against ``rest``), into ``out``; ``rest`` keeps the exact remainder. Adding and subtracting
    1.5 · 2**(e − bits + 52) rounds to that grid (the sum stays in one binade); the remainder
    is exact (Sterbenz). In place: these arrays are replicates × terms large."""
    _, exponent = np.frexp(top)
    sigma = np.ldexp(1.5, exponent - bits + 52)
    np.add(rest, sigma, out=out)
    np.subtract(out, sigma, out=out)
    np.subtract(rest, out, out=rest)
    return out


def _bound(rest: np.ndarray, axis: int, keepdims: bool = False) -> np.ndarray:
    """max |rest| along ``axis``, without an |rest| temporary."""
    high = rest.max(axis, keepdims=keepdims, initial=0.0)
    low = rest.min(axis, keepdims=keepdims, initial=0.0)
    return np.maximum(high, -low)


def _stack(parts: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    return np.stack(parts, axis=-1) if parts else np.zeros((*shape, 1))


def round_parts(parts: np.ndarray) -> np.ndarray:
    """The correctly rounded sum over the last axis of exact parts (:func:`exact_parts`)."""
    out = parts.sum(-1)  # at most one non-zero part: exact already
    for index in zip(*np.nonzero(np.count_nonzero(parts, axis=-1) > 1), strict=True):
        out[index] = math.fsum(parts[index].tolist())
    return out


def exact_parts(values: np.ndarray, plus: np.ndarray | None = None) -> np.ndarray:
    """Exact partial sums over the last axis of ``values`` (and of ``plus``, one more term per
    row): shape ``values.shape[:-1] + (parts,)``; :func:`round_parts` rounds them. Rows with a
    NaN, an infinity or a huge term get one part: numpy's sum (``math.fsum``'s if finite)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0:
        raise ValueError("exact sums run over the last axis of an array")
    out_shape = values.shape[:-1]
    rows = values.reshape(math.prod(out_shape), values.shape[-1])
    top = _bound(rows, -1, keepdims=True)  # NaN where a term is
    special = ~(top[:, 0] <= _HUGE)
    parts = []
    if plus is not None:  # one exact term of each row: a part as it is
        extra = np.broadcast_to(np.asarray(plus, dtype=np.float64), out_shape).reshape(-1)
        special |= ~np.isfinite(extra)
        parts.append(np.where(special, 0.0, extra))
    rest = rows.copy()
    if special.any():
        rest[special], top[special] = 0.0, 0.0
    sliced = np.empty_like(rest)
    bits = _slice_bits(rows.shape[-1] + (plus is not None))
    live = np.arange(len(rows))
    while True:
        going = top[:, 0] > 0
        if not going.any():
            break
        if not going.all():  # only rows with a remainder slice on
            rest, top, live, sliced = rest[going], top[going], live[going], sliced[going]
        part = np.zeros(len(rows))
        part[live] = _extract(rest, top, bits, sliced).sum(-1)
        parts.append(part)
        top = _bound(rest, -1, keepdims=True)
    stacked = _stack(parts, (len(rows),))
    for i in np.flatnonzero(special):
        terms = rows[i].tolist() + ([] if plus is None else [float(extra[i])])
        stacked[i] = 0.0
        try:
            stacked[i, 0] = math.fsum(terms)
        except (OverflowError, ValueError):  # inf − inf, or a sum beyond float64
            with np.errstate(over="ignore", invalid="ignore"):
                stacked[i, 0] = np.sum(terms)
    return stacked.reshape(*out_shape, stacked.shape[-1])


def exact_sum(values: np.ndarray, plus: np.ndarray | None = None) -> np.ndarray:
    """The correctly rounded sum over the last axis (``math.fsum`` of each row, with ``plus``
    one more term), of many rows at once."""
    return round_parts(exact_parts(values, plus))


def _split_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's error-free product: a · b = p + e exactly (no overflow or underflow)."""

    def split(x):
        c = 134217729.0 * x  # 2**27 + 1
        high = c - (c - x)
        return high, x - high

    p = a * b
    (ah, al), (bh, bl) = split(a), split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def exact_products_sum(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Σ weights · values over the last axis (shapes broadcast), correctly rounded: the sum of
    each product's exact two parts (:func:`exact_sum`)."""
    weights, values = np.broadcast_arrays(
        np.asarray(weights, np.float64), np.asarray(values, np.float64)
    )
    p, e = _split_product(weights, values)
    return exact_sum(np.concatenate([p, e], axis=-1))


def exact_weighted_sums(
    weights: np.ndarray, values: np.ndarray, *, remember: bool = False
) -> np.ndarray:
    """``weights @ values``, each entry correctly rounded (``math.fsum`` of the exact products).

    ``weights`` (replicates × terms) must be integers (bootstrap counts, 0/1 swaps): a slice
    times an integer weight is then exact, and so is any sum of them on one grid, so the slices
    go through one BLAS product. ``values`` is terms × columns (or a vector of terms); a column
    with a NaN, an infinity or a huge term is numpy's product (``math.fsum``'s if finite).
    ``remember``: ``values`` is a table summed again with other weights, never changed in
    place: its slices are kept for the next call (:func:`_sliced_columns`)."""
    weights = np.asarray(weights, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    vector = values.ndim == 1
    columns = values[:, None] if vector else values
    if not np.array_equal(weights, np.rint(weights)):
        raise ValueError("exact weighted sums need integer weights")
    bits = _slice_bits(float(np.abs(weights).sum(1).max(initial=0.0)))
    matrix, owner, rank, special = _sliced_columns(columns, bits, remember=remember)
    width = columns.shape[1]
    if not len(owner):
        out = np.zeros((len(weights), width))
    else:
        sums = weights @ matrix  # exact: integers times grid steps below 2**53 steps
        parts = np.zeros((len(weights), width, int(rank.max()) + 1))
        parts[:, owner, rank] = sums
        out = round_parts(parts)
    for column in np.flatnonzero(special):
        out[:, column] = _special_column(weights, columns[:, column])
    return out[:, 0] if vector else out


#: The last few columns sliced (:func:`_sliced_columns`): the bootstrap sums the same
#: per-document table (a model's) for every block of replicates. At most this many bytes of
#: slices are kept (a 100x zoo's tables are sliced again per block rather than held).
_SLICED: dict[tuple, tuple] = {}
_SLICED_BYTES = 128 << 20
_SLICED_LOCK = threading.Lock()


def _sliced_columns(columns: np.ndarray, bits: int, *, remember: bool) -> tuple:
    """``columns`` (terms × columns) split into slices on grids of ``bits`` bits: the slices
    side by side (terms × slices), each slice's column and its rank among that column's
    slices, and which columns are special (a NaN, an infinity or a huge term: not sliced).
    With ``remember``, kept for the next call with the same array (by its memory, shape and
    strides; the array is kept with its slices, so that memory is not reused while
    remembered): for tables summed again and again and never changed in place."""
    key = (columns.__array_interface__["data"][0], columns.shape, columns.strides, bits)
    with _SLICED_LOCK:
        kept = _SLICED.get(key)
    if kept is not None:
        return kept[1]
    finite = np.isfinite(columns).all(0)
    special = ~finite | (_bound(np.where(finite, columns, 0.0), 0) > _HUGE)
    rest = np.where(special, 0.0, columns)
    slices, owner = [], []
    while True:
        top = _bound(rest, 0)
        live = np.flatnonzero(top > 0)
        if not len(live):
            break
        chunk = rest[:, live]
        slices.append(_extract(chunk, top[live], bits, np.empty_like(chunk)))
        rest[:, live] = chunk  # the remainder
        owner.append(live)
    owner = np.concatenate(owner) if owner else np.zeros(0, dtype=np.int64)
    rank = np.zeros(len(owner), dtype=np.int64)
    count = np.zeros(columns.shape[1], dtype=np.int64)
    for i, column in enumerate(owner.tolist()):
        rank[i] = count[column]
        count[column] += 1
    matrix = np.ascontiguousarray(np.hstack(slices)) if slices else np.zeros((len(columns), 0))
    result = (matrix, owner, rank, special)
    if remember and matrix.nbytes <= _SLICED_BYTES:
        with _SLICED_LOCK:
            _SLICED[key] = (columns, result)
            while sum(kept[1][0].nbytes for kept in _SLICED.values()) > _SLICED_BYTES:
                del _SLICED[next(iter(_SLICED))]  # the oldest
    return result


def _special_column(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A column with a non-finite or huge term: ``math.fsum`` of the exact products per row,
    or numpy's sum where that overflows or meets inf − inf."""
    plain = weights @ values
    if not np.isfinite(values).all():
        return plain
    for row in range(weights.shape[0]):
        p, e = _split_product(weights[row], values)
        with contextlib.suppress(OverflowError, ValueError):  # keep numpy's sum
            plain[row] = math.fsum(p.tolist() + e.tolist())
    return plain
