"""The randomization test's compiled state lookup against a plain Python loop over the same
inputs: per permutation and part, the sum of the table rows at each node's state."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from hieval.metrics.uncertainty.state_sums import state_sums


def reference(swapped, index, start, sections, table):
    """Node by node in Python: a node's state is its start plus the steps of the swapped
    documents that move it."""
    rows, parts = swapped.shape[1], len(sections) - 1
    out = np.zeros((rows, parts, table.shape[1]))
    for r in range(rows):
        for p in range(parts):
            for node in range(sections[p], sections[p + 1]):
                state = start[node] + sum(
                    int(step) * int(swapped[doc, r])
                    for doc, step in zip(
                        index.indices[index.indptr[node] : index.indptr[node + 1]],
                        index.data[index.indptr[node] : index.indptr[node + 1]],
                        strict=True,
                    )
                )
                out[r, p] += table[state]
    return out


def test_state_sums_equal_a_plain_loop():
    rng = np.random.default_rng(5)
    docs, nodes, rows = 12, 9, 17
    # Each node is moved by a few documents; its states are 0 .. the sum of its steps.
    movers = sparse.random(nodes, docs, density=0.3, random_state=6, format="csr")
    movers.data = rng.integers(1, 4, movers.nnz).astype(np.float64)
    index = movers.astype(np.int64)
    sizes = np.asarray(index.sum(1)).ravel() + 1
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    table = rng.normal(size=(int(sizes.sum()), 4))
    sections = np.array([0, 4, 4, 9])  # an empty part too
    swapped = rng.integers(0, 2, size=(docs, rows)).astype(np.uint8)
    got = state_sums(swapped, index=(index.indptr, index.indices, index.data), start=start,
                     sections=sections, table=table)  # fmt: skip
    want = reference(swapped, index, start, sections, table)
    assert got.shape == (rows, 3, 4)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert not got[:, 1].any()  # the empty part sums nothing
    # No swap: every node at its start state.
    none = state_sums(np.zeros((docs, 1), dtype=np.uint8), index=(index.indptr, index.indices,
                      index.data), start=start, sections=sections, table=table)  # fmt: skip
    np.testing.assert_allclose(none[0, 0], table[start[:4]].sum(0), rtol=0, atol=1e-12)


def test_without_a_writable_cache_the_loop_is_compiled_uncached(monkeypatch):
    """numba refuses ``cache=True`` where no folder is writable (a read-only install without
    a home folder): the loop is then compiled per process, not an import error."""
    from hieval import compiled as module
    from hieval.metrics.uncertainty import state_sums

    calls = []

    def njit(**options):
        calls.append(options)
        if options.get("cache"):
            raise RuntimeError("cannot cache function: no locator available")
        return lambda function: function

    monkeypatch.setattr(module, "njit", njit)
    compiled = module.compiled(state_sums._state_sums_py)
    assert compiled is state_sums._state_sums_py
    assert calls == [{"cache": True, "nogil": True}, {"nogil": True}]
