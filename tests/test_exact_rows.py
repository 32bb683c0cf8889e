"""The compiled exact row sums (hieval.metrics.uncertainty.exact_rows) against ``math.fsum``
of each row, the correctly rounded sum (the independent reference), bit for bit: both memory
layouts, the extra term, rows it leaves to arithmetic.exact_parts (a remainder after three
grids, subnormal bounds, NaN, infinities, huge terms), and random arrays (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hieval.metrics.arithmetic import round_parts
from hieval.metrics.uncertainty.exact_rows import row_parts


def _fsum_rows(values: np.ndarray, plus: np.ndarray | None = None) -> np.ndarray:
    """math.fsum of each row (and its extra term); numpy's sum where fsum refuses (inf − inf,
    an overflowing sum), as exact_parts documents."""
    rows = values.reshape(-1, values.shape[-1])
    extra = None if plus is None else np.broadcast_to(plus, values.shape[:-1]).reshape(-1)
    out = np.empty(len(rows))
    for i, row in enumerate(rows):
        terms = row.tolist() + ([] if extra is None else [float(extra[i])])
        try:
            out[i] = math.fsum(terms)
        except (OverflowError, ValueError):
            with np.errstate(over="ignore", invalid="ignore"):
                out[i] = np.sum(terms)
    return out.reshape(values.shape[:-1])


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nan = np.isnan(a) & np.isnan(b)
    return bool(
        np.array_equal(np.where(nan, 0.0, a).view(np.uint64), np.where(nan, 0.0, b).view(np.uint64))
    )


def _ratios(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Count-family-like values: ratios of small counts (most with 53 significant bits)."""
    return rng.integers(0, 60, shape) / rng.integers(1, 90, shape).astype(np.float64)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (40, 3000), (7, 600)])
def test_ratios_equal_fsum(order, shape):
    values = np.asarray(_ratios(np.random.default_rng(shape[1]), shape), order=order)
    assert _same_bits(round_parts(row_parts(values)), _fsum_rows(values))


@pytest.mark.parametrize("order", ["C", "F"])
def test_extra_term(order):
    rng = np.random.default_rng(3)
    values = np.asarray(_ratios(rng, (25, 400)), order=order)
    plus = rng.integers(0, 1000, 25).astype(np.float64) + rng.random(25)
    assert _same_bits(round_parts(row_parts(values, plus=plus)), _fsum_rows(values, plus))


@pytest.mark.parametrize("order", ["C", "F"])
def test_rows_left_to_exact_parts(order):
    """Rows the three grids cannot hold: a huge dynamic range (a remainder), subnormal terms,
    NaN, infinities, terms beyond 2**900; beside ordinary rows, in one array."""
    rng = np.random.default_rng(5)
    values = _ratios(rng, (9, 50))
    values[0] = 0.0
    values[0, :3] = [1e6, 1e-40 / 3, -1e6]  # a remainder after three grids, then cancellation
    values[1] = 5e-324 * np.arange(50)  # subnormal bound
    values[2, 7] = np.nan
    values[3, 1] = np.inf
    values[4, [1, 2]] = [np.inf, -np.inf]
    values[5, 0] = 2.0**950
    values[6] = -0.0
    values[7] = 0.0
    values[8] = 1e-300 / 7  # tiny bound: grids would be subnormal
    values = np.asarray(values, order=order)
    assert _same_bits(round_parts(row_parts(values)), _fsum_rows(values))
    plus = np.array([1.0, np.nan, 0.0, 2.0, 0.0, 3.0, -0.0, np.inf, 1e-300])
    assert _same_bits(round_parts(row_parts(values, plus=plus)), _fsum_rows(values, plus))


def test_more_dimensions_and_errors():
    values = _ratios(np.random.default_rng(9), (2, 3, 11))
    parts = row_parts(values)
    assert parts.shape[:2] == (2, 3)
    assert _same_bits(round_parts(parts), _fsum_rows(values))
    with pytest.raises(ValueError, match="last axis"):
        row_parts(np.float64(1.0))


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=2, max_dims=2, max_side=40),
        elements=st.floats(allow_nan=False, allow_infinity=False, width=64),
    ),
    st.booleans(),
)
def test_any_finite_array(values, transposed):
    values = np.asfortranarray(values) if transposed else values
    with np.errstate(over="ignore", invalid="ignore"):
        assert _same_bits(round_parts(row_parts(values)), _fsum_rows(values))


def test_node_sums_compiled_or_not_are_the_same_numbers(monkeypatch):
    """The bootstrap's node sums (replicates × nodes, node-major as the sparse products leave
    them) give the same correctly rounded sums whether numpy or the compiled kernel slices
    them (replicates._NUMPY_TERMS decides)."""
    from hieval.metrics.uncertainty import replicates

    rng = np.random.default_rng(11)
    tp, fp, fn = (np.asfortranarray(rng.poisson(0.7, (30, 500)).astype(np.float64)) for _ in "abc")
    pure = rng.integers(0, 3, 500)
    items = np.full((30, 1), 40.0)
    sums = {}
    for terms in (10**18, 0):  # numpy only, compiled only
        monkeypatch.setattr(replicates, "_NUMPY_TERMS", terms)
        sums[terms] = replicates.rounded(
            replicates.node_sums(tp, fp, fn, items=items, pure=pure, exact=True)
        )
    assert sums[0].keys() == sums[10**18].keys()
    for name, value in sums[0].items():
        assert _same_bits(value, sums[10**18][name]), name
    # and each is math.fsum of the per-node values (here with the compiled kernel: terms 0)
    precision = replicates.COUNT_MEASURES["precision"](tp, fp, fn)
    whole = replicates.rounded(replicates.node_sums(tp, fp, fn, exact=True))["precision"]
    assert _same_bits(whole, _fsum_rows(np.ascontiguousarray(precision)))
