"""LCA-F's sort and chain positions (issue 36's speed-up) against the plain numpy they replace."""

from __future__ import annotations

import numpy as np
import pytest

from hieval.engine.lca import _chain_positions, _sort


@pytest.mark.parametrize("high", [2**20, 2**50, 2**62])  # packed with positions, or not
def test_sort_orders_keys_as_argsort_does(high):
    rng = np.random.default_rng(3)
    key = rng.integers(0, high, 5000, dtype=np.int64)
    key[::7] = key[0]  # ties
    order, sorted_key = _sort(key)
    assert np.array_equal(sorted_key, np.sort(key))
    assert np.array_equal(key[order], sorted_key)
    assert np.array_equal(np.sort(order), np.arange(key.size))  # a permutation


def test_sort_of_one_key():
    order, sorted_key = _sort(np.array([5], dtype=np.int64))
    assert order.tolist() == [0] and sorted_key.tolist() == [5]


def test_chain_positions_are_each_labels_chain_in_turn():
    start = np.array([4, 0, 9, 4], dtype=np.int64)
    n = np.array([3, 1, 2, 3], dtype=np.int64)
    first = np.cumsum(n) - n
    expected = np.concatenate([np.arange(s, s + k) for s, k in zip(start, n, strict=True)])
    assert _chain_positions(start, n, first).tolist() == expected.tolist()
    assert expected.tolist() == [4, 5, 6, 0, 9, 10, 4, 5, 6]
