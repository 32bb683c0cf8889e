"""The randomization test's inner loop, compiled: per permutation, the sum of the looked-up
nodes' quantities (:func:`hieval.metrics.uncertainty.replicates.pair_plan` tabulates them per
state).

Why compiled: per permutation and node the work is tiny (the node's state is its offset plus
the state steps of the few documents that move it and are swapped; then one row of a small
table is added), but there are ~16,000 such nodes per pair of MIMIC-sized models and 9,999
permutations. As two scipy sparse products (swaps → states, states → table rows) it was half
of the test's time, most of it building and reading a permutations × nodes selection matrix.
Compiled with numba, node by node and, inside a node, permutation by permutation, every
operand is a few kilobytes in cache (the node's ≤ 64 table rows, a block of permutations'
swaps of one document), and nothing the size of permutations × nodes is ever made: 5× faster
on the benchmark's zoo.

The sums are taken in node order for every permutation, exactly as the sparse product did,
so the results are the same floating-point numbers (tests/test_uncertainty_speed.py).
"""

from __future__ import annotations

import numpy as np

from hieval.compiled import compiled


def _state_sums_py(
    swapped: np.ndarray,
    indptr: np.ndarray,
    docs: np.ndarray,
    steps: np.ndarray,
    start: np.ndarray,
    sections: np.ndarray,
    table: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled; tested through state_sums
    rows = swapped.shape[1]
    width = table.shape[1]
    state = np.empty(rows, dtype=np.int64)
    for part in range(sections.size - 1):
        for node in range(sections[part], sections[part + 1]):
            state[:] = start[node]
            for k in range(indptr[node], indptr[node + 1]):
                column = swapped[docs[k]]
                step = steps[k]
                for r in range(rows):
                    state[r] += step * column[r]
            for r in range(rows):
                row = state[r]
                for c in range(width):
                    out[part, r, c] += table[row, c]


_state_sums = compiled(_state_sums_py)


def state_sums(
    swapped: np.ndarray,
    *,
    index: tuple[np.ndarray, np.ndarray, np.ndarray],
    start: np.ndarray,
    sections: np.ndarray,
    table: np.ndarray,
) -> np.ndarray:
    """Per permutation and part, Σ over the part's nodes of ``table[state]`` (permutations ×
    parts × table columns).

    ``swapped``: documents × permutations, 1 where the permutation swaps the document (uint8);
    ``index``: per node, the documents that move it and the state step each one's swap adds
    (CSR over nodes: ``indptr``, ``docs``, ``steps``); a node's state is ``start[node]`` plus
    the steps of its swapped documents; ``sections``: the parts' first nodes (and the end).
    """
    indptr, docs, steps = index
    out = np.zeros((sections.size - 1, swapped.shape[1], table.shape[1]))
    _state_sums(
        np.ascontiguousarray(swapped, dtype=np.uint8),
        indptr.astype(np.int64, copy=False),
        docs.astype(np.int64, copy=False),
        steps.astype(np.int64, copy=False),
        start.astype(np.int64, copy=False),
        sections.astype(np.int64, copy=False),
        np.ascontiguousarray(table, dtype=np.float64),
        out,
    )
    return out.transpose(1, 0, 2)
