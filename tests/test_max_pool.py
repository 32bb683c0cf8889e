"""The compiled max-pooling of a block to every level (hieval.metrics.max_pool) against a
naive maximum over each node's columns, written here."""

from __future__ import annotations

import numpy as np
import pytest

from hieval.metrics.max_pool import CompiledPooling


@pytest.mark.parametrize("seed", range(4))
def test_every_level_is_the_maximum_of_its_columns(seed):
    rng = np.random.default_rng(seed)
    width = 40
    node_of = {}
    for name, n_nodes in (("fine", 12), ("coarse", 3)):
        nodes = rng.integers(-1, n_nodes, width)
        nodes[:n_nodes] = np.arange(n_nodes)  # every node holds a column
        node_of[name] = nodes
    block = rng.standard_normal((9, width)).astype(np.float32)
    block[:, 5] = np.float32(-np.inf) if seed == 0 else block[:, 5]
    pooling = CompiledPooling(node_of)
    pooled = pooling.pool(block)
    for name, nodes in node_of.items():
        ours = pooling.block(name, pooled)
        naive = np.stack(
            [block[:, nodes == node].max(axis=1) for node in range(int(nodes.max()) + 1)], axis=1
        )
        assert ours.dtype == block.dtype
        assert np.array_equal(ours, naive)


def test_hand_worked():
    pooling = CompiledPooling({"level": np.array([0, 1, 0, -1])})
    pooled = pooling.pool(np.array([[0.2, 0.9, 0.4, 1.0], [0.5, 0.1, 0.3, 0.0]]))
    assert pooling.block("level", pooled).tolist() == [[0.4, 0.9], [0.5, 0.1]]
