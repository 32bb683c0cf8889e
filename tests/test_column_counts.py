"""The merged column counts (hieval.metrics.column_counts) against a naive count written
here: for each positive, its column's cells below it and at or below it, over several blocks."""

from __future__ import annotations

import numpy as np
import pytest

from hieval.metrics.column_counts import ColumnCounts


@pytest.mark.parametrize("seed", range(5))
def test_counts_equal_a_naive_count_over_blocks(seed):
    rng = np.random.default_rng(seed)
    matrix = np.round(rng.random((23, 6)), 1).astype(np.float32)  # ties
    cols = rng.integers(0, 6, 17)
    values = matrix[rng.integers(0, 23, 17), cols]  # scores that occur, and so tie
    values[:3] = np.float32([-1, 2, 0.55])  # below, above and between every cell
    counts = ColumnCounts(cols, values, 6)
    for start in range(0, 23, 5):
        counts.add(matrix[start : start + 5])
    below, at_or_below = counts.counts()
    for i, (c, v) in enumerate(zip(cols, values, strict=True)):
        assert below[i] == int((matrix[:, c] < v).sum())
        assert at_or_below[i] == int((matrix[:, c] <= v).sum())


def test_a_column_without_positives_and_no_positive_at_all():
    counts = ColumnCounts(np.array([2]), np.array([0.5], dtype=np.float32), 3)
    counts.add(np.array([[0.1, 0.9, 0.5], [0.7, 0.2, 0.4]], dtype=np.float32))
    assert [a.tolist() for a in counts.counts()] == [[1], [2]]
    empty = ColumnCounts(np.zeros(0, np.int64), np.zeros(0, np.float32), 3)
    empty.add(np.ones((2, 3), dtype=np.float32))
    assert [a.tolist() for a in empty.counts()] == [[], []]
