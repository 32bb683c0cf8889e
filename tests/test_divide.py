"""arithmetic.divide against a reference written here, element by element in Python: the
IEEE quotient where the denominator is positive, ``zero_division`` elsewhere (0, negative,
NaN), bit for bit (signs of zeros, NaN, infinities), broadcasting, 0-d inputs, no warnings."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from hieval.metrics.arithmetic import divide

SPECIAL = [0.0, -0.0, 1.0, -1.0, 3.0, 1e-310, 1e308, math.inf, -math.inf, math.nan]


def _reference(num: float, den: float, zero_division: float) -> float:
    if den > 0:  # False for NaN
        with np.errstate(all="ignore"):
            return float(np.float64(num) / np.float64(den))
    return zero_division if zero_division != 0 else 0.0  # a zero of either sign is +0


def _bits(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.isnan(x), np.nan, x).view(np.uint64)  # one NaN pattern


@pytest.mark.parametrize("zero_division", [0.0, -0.0, 1.0, math.nan])
def test_every_pair_of_special_values(zero_division):
    pairs = list(itertools.product(SPECIAL, repeat=2))
    num = np.array([p[0] for p in pairs])
    den = np.array([p[1] for p in pairs])
    expected = np.array([_reference(n, d, zero_division) for n, d in pairs])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # dividing by 0 where it is not used warns nothing
        got = divide(num, den, zero_division=zero_division)
    assert got.dtype == np.float64
    assert np.array_equal(_bits(got), _bits(expected))


def test_broadcasting_and_zero_dimensional_inputs():
    rng = np.random.default_rng(4)
    num = rng.integers(-3, 5, (6, 1)).astype(np.float64)
    den = rng.integers(-1, 4, (1, 7)).astype(np.float64)
    got = divide(num, den)
    assert got.shape == (6, 7)
    expected = [[_reference(n, d, 0.0) for d in den[0]] for n in num[:, 0]]
    assert np.array_equal(_bits(got), _bits(expected))
    assert divide(1.0, 0.0, zero_division=2.0) == 2.0
    assert divide(np.float64(1.0), 4.0).shape == ()
    out = divide(np.ones(3), np.full(3, 2.0))
    out[0] = 7.0  # a fresh array, never a view of an input
    assert out.tolist() == [7.0, 0.5, 0.5]
