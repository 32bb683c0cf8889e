"""The correctly rounded sums of many rows (hieval.metrics.arithmetic) against independent
oracles: ``math.fsum`` (Shewchuk's exact partials) and exact rational arithmetic
(``fractions.Fraction``), on data built to defeat ordinary summation: catastrophic
cancellation, terms spread over hundreds of binades, exact rounding ties, many rows."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from hieval.metrics.arithmetic import (
    exact_parts,
    exact_products_sum,
    exact_sum,
    exact_weighted_sums,
    round_parts,
)


def _fsum_rows(x: np.ndarray) -> np.ndarray:
    return np.array([math.fsum(row) for row in x.reshape(-1, x.shape[-1]).tolist()]).reshape(
        x.shape[:-1]
    )


def _exact_dot(w: np.ndarray, v: np.ndarray) -> float:
    """Σ w·v in rational arithmetic, rounded once (Fraction → float rounds correctly)."""
    return float(sum((Fraction(a) * Fraction(b) for a, b in zip(w, v, strict=True)), Fraction()))


def _adversarial(rng: np.random.Generator, rows: int, terms: int) -> dict[str, np.ndarray]:
    big = rng.normal(size=(rows, terms // 2)) * 1e16
    return {
        "uniform": rng.random((rows, terms)),
        "cancellation": np.concatenate(
            [big, -big, rng.random((rows, terms - 2 * (terms // 2)))], axis=1
        ),
        "mixed_magnitudes": rng.normal(size=(rows, terms))
        * 10.0 ** rng.integers(-300, 300, size=(rows, terms)),
        "near_magnitudes": rng.normal(size=(rows, terms))
        * 10.0 ** rng.integers(-20, 20, size=(rows, terms)),
        "metric_values": rng.integers(0, 50, (rows, terms)) / rng.integers(1, 90, (rows, terms)),
        "ties": np.tile([1.0, 2.0**-53, 2.0**-106, -(2.0**-106)], (rows, terms // 4 + 1)),
        "zeros": np.zeros((rows, terms)),
    }


@pytest.mark.parametrize(
    "case",
    ["uniform", "cancellation", "mixed_magnitudes", "near_magnitudes", "metric_values", "ties",
     "zeros"],
)  # fmt: skip
def test_exact_sum_is_fsum_of_every_row(case):
    x = _adversarial(np.random.default_rng(3), 64, 801)[case]
    got = exact_sum(x)
    assert np.array_equal(got, _fsum_rows(x))


def test_ordinary_summation_fails_the_adversarial_rows():
    """The oracle test above can fail: numpy's pairwise sum misses these rows' exact sums."""
    data = _adversarial(np.random.default_rng(3), 64, 801)
    for case in ("cancellation", "near_magnitudes"):
        x = data[case]
        assert not np.array_equal(x.sum(-1), _fsum_rows(x)), case


def test_exact_sum_with_one_more_term_and_over_leading_axes():
    rng = np.random.default_rng(5)
    x = rng.random((3, 7, 40)) * 10.0 ** rng.integers(-12, 12, (3, 7, 40))
    plus = rng.integers(0, 1000, (3, 7)).astype(np.float64)
    expected = _fsum_rows(np.concatenate([x, plus[..., None]], axis=-1))
    assert np.array_equal(exact_sum(x, plus=plus), expected)
    assert exact_sum(np.zeros((4, 0))).tolist() == [0.0] * 4


def test_parts_of_two_sums_concatenate_into_the_parts_of_their_total():
    """The ``overall`` rows pool levels by concatenating their exact parts."""
    rng = np.random.default_rng(7)
    a = rng.random((20, 300)) / 3
    b = rng.normal(size=(20, 500)) * 1e8
    pooled = round_parts(np.concatenate([exact_parts(a), exact_parts(b)], axis=-1))
    assert np.array_equal(pooled, _fsum_rows(np.concatenate([a, b], axis=-1)))


def test_non_finite_rows_are_summed_as_numpy_does():
    x = np.array([[1.0, np.inf, 2.0], [np.nan, 1.0, 0.0], [1.0, 2.0, 3.0], [1e308, 1e308, 1.0]])
    got = exact_sum(x)
    assert got[0] == np.inf and np.isnan(got[1]) and got[2] == 6.0 and got[3] == np.inf


def test_weighted_sums_are_the_exact_rational_sums():
    rng = np.random.default_rng(11)
    weights = rng.poisson(1.0, size=(12, 3000)).astype(np.float64)
    swaps = rng.integers(0, 2, size=(4, 3000)).astype(np.float64)
    columns = np.column_stack(
        [
            rng.random(3000),
            np.floor(rng.random(3000) * 20),  # counts: exact in any order already
            rng.random(3000) * 10.0 ** rng.integers(-30, 30, 3000),
            rng.normal(size=3000) * 10.0 ** rng.integers(-300, 300, 3000),
            np.concatenate([np.full(1500, 1e16), np.full(1500, -1e16)]) + rng.random(3000),
        ]
    )
    for w in (weights, swaps, np.ones((1, 3000))):
        got = exact_weighted_sums(w, columns)
        for r in range(min(len(w), 6)):
            for c in range(columns.shape[1]):
                assert got[r, c] == _exact_dot(w[r], columns[:, c]), (r, c)
    vector = exact_weighted_sums(weights, columns[:, 0])
    assert np.array_equal(vector, exact_weighted_sums(weights, columns)[:, 0])


def test_weighted_sums_refuse_fractional_weights():
    with pytest.raises(ValueError, match="integer weights"):
        exact_weighted_sums(np.full((1, 3), 0.5), np.ones(3))


def test_products_sums_are_the_exact_rational_sums():
    rng = np.random.default_rng(13)
    w = rng.poisson(2.0, size=(10, 500)).astype(np.float64)
    v = rng.random((10, 500)) * 10.0 ** rng.integers(-10, 10, (10, 500))
    got = exact_products_sum(w, v)
    assert got.tolist() == [_exact_dot(w[r], v[r]) for r in range(10)]


def test_many_rows_at_once():
    """1,000 replicates × 5,000 nodes (a bootstrap block's node sums): every row is fsum's."""
    x = np.random.default_rng(17).random((1000, 5000))
    assert np.array_equal(exact_sum(x), _fsum_rows(x))


def test_remembered_slices_serve_only_their_own_table():
    """``remember=True`` keeps a table's slices for the next blocks of weights; another table
    of the same shape (a new array) is sliced afresh, never served the first one's slices."""
    rng = np.random.default_rng(19)
    first = rng.random((500, 3))
    second = rng.random((500, 3)) * 1e-7
    for block in range(3):
        w = rng.poisson(1.0, size=(4, 500)).astype(np.float64)
        for table in (first, second):
            got = exact_weighted_sums(w, table, remember=True)
            expected = [[_exact_dot(w[r], table[:, c]) for c in range(3)] for r in range(4)]
            assert got.tolist() == expected, block


@pytest.mark.parametrize("seed", range(4))
def test_exact_mean_of_an_array_is_fsums_mean_bit_for_bit(seed):
    """``exact_mean`` of a float64 array (the vectorised sum the metrics' means take) gives the
    bits of ``math.fsum`` over the same values as a list, divided by their count; with NaN and
    infinities as ``math.fsum`` has them."""
    from hieval.metrics.arithmetic import exact_mean

    rng = np.random.default_rng(seed)
    for name, rows in _adversarial(rng, 3, 1_000).items():
        for row in rows:
            expected = math.fsum(row.tolist()) / row.size
            assert exact_mean(row).hex() == expected.hex(), name
            assert exact_mean(row[:1]).hex() == row[0].hex(), name
    ratios = rng.integers(0, 9, 50_000) / rng.integers(1, 9, 50_000)  # ties and repeats
    assert exact_mean(ratios).hex() == (math.fsum(ratios.tolist()) / ratios.size).hex()
    assert exact_mean(np.array([], dtype=np.float64)) == 0.0
    edges = {
        "subnormals": np.array([5e-324, 5e-324, -1e-323, 2.5e-308]),
        "huge": np.array([2.0**905, -(2.0**904), 3.0, 2.0**903]),
        "signed zeros": np.array([-0.0, -0.0]),
        "near overflow": np.array([1.7e308, -1.7e308, 1.0]),
    }
    for name, row in edges.items():
        assert exact_mean(row).hex() == (math.fsum(row.tolist()) / row.size).hex(), name
    # Where fsum's result is not finite, or it raises, the mean is fsum's, as it always was.
    assert math.isnan(exact_mean(np.array([1.0, np.nan])))
    assert exact_mean(np.array([1.0, np.inf])) == math.inf
    for raising in ([1e308, 1e308], [1e308, 1e308, -1e308], [math.inf, -math.inf]):
        with pytest.raises((OverflowError, ValueError)):
            math.fsum(raising)
        with pytest.raises((OverflowError, ValueError)):
            exact_mean(np.array(raising))
