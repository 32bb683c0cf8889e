"""The two pieces of arithmetic every metric shares: a ratio with a declared value where its
denominator is 0, and a mean that does not depend on the order of its terms.

Metrics differ in what a 0 denominator means (P/R/F 0 by convention, the example-based
measures 1 -- nothing to find and nothing found --, a bootstrap replicate NaN -- it drew
nothing of the row); they should not differ in how the division is done, so that the reported
value and a replicate run the same float64 operations. Written once here.
"""

from __future__ import annotations

import math

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
    shape = np.broadcast_shapes(num.shape, den.shape)
    # np.zeros takes pages the OS zeroes lazily: the common case writes its output once.
    out = np.zeros(shape) if zero_division == 0 else np.full(shape, zero_division, np.float64)
    return np.divide(num, den, out=out, where=den > 0)


def exact_mean(values) -> float:
    """Mean with a correctly rounded sum (``math.fsum``); 0 for no values.

    A parallel group-by sums floats in an order that varies between runs, which changes the last
    bits of a mean; the correctly rounded sum does not depend on order, so reports regenerate
    bit for bit.
    """
    values = list(values)
    return math.fsum(values) / len(values) if values else 0.0
