"""The error analysis's kernels made cheaper for issue 36, called directly against references
written here (plain Python over sets and Counters, or the Polars group-by they replace), on
small random inputs: repeated pairs over many documents (ties), empty documents, documents with
misses only or wrong codes only, codes without a node at some levels, and node tables that are
no tree (the kernels must not assume one).

- :func:`hieval.analysis.errors_compiled.near_pair_counts`: the near-miss pairs counted as
  integers (errors whose nearest level is too far skipped);
- :func:`hieval.analysis.errors_compiled.nearest`: the ranks it is handed;
- :func:`hieval.analysis.errors_compiled.unmatched`: misses and wrong codes split into
  document and code;
- :func:`hieval.analysis.errors._cell_counts`: the cells of ``errors.parquet`` counted with
  NumPy.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl
import pytest

from hieval.analysis import errors_compiled
from hieval.analysis.errors import CELL, _cell_counts
from hieval.engine.keys import DOC_SHIFT


def _random_nodes(rng: np.random.Generator, *, codes: int, levels: int, tree: bool) -> np.ndarray:
    """A (levels x codes) node table, deepest level first, the last level (the root) all -1:
    as a tree (each level's nodes group the level below's) or arbitrary ids; some codes have
    no node at the deepest levels."""
    node = np.full((levels, codes), -1, dtype=np.int64)
    if tree:
        node[levels - 2] = rng.integers(0, 2, codes)
        for at in range(levels - 3, -1, -1):
            node[at] = node[at + 1] * 3 + rng.integers(0, 3, codes)
    else:
        node[: levels - 1] = rng.integers(0, 4, (levels - 1, codes))
    shallow = rng.random(codes) < 0.2  # placed only above the deepest level
    node[0, shallow] = -1
    return node


def _random_documents(rng: np.random.Generator, *, documents: int, codes: int) -> list:
    """Per document, its misses and its wrong codes (distinct codes; a code is on one side of
    its document at most): empty documents, misses only, wrong codes only, and both."""
    out = []
    for _ in range(documents):
        chosen = sorted(rng.permutation(codes)[: rng.integers(1, min(codes, 8) + 1)].tolist())
        shape = rng.integers(0, 4)
        if shape == 0:
            out.append(([], []))
        elif shape == 1:
            out.append((chosen, []))
        elif shape == 2:
            out.append(([], chosen))
        else:
            picked = set(rng.permutation(chosen)[: rng.integers(0, len(chosen) + 1)].tolist())
            out.append(
                (
                    [c for c in chosen if c in picked],
                    [c for c in chosen if c not in picked],
                )
            )
    return out


def _sides(docs: list) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``(doc, code)`` arrays of the misses and of the wrong codes, by document then code."""
    sides = []
    for side in (0, 1):
        pairs = [(d, c) for d, doc in enumerate(docs) for c in doc[side]]
        sides.append(
            tuple(np.array([p[i] for p in pairs], dtype=np.int64).reshape(-1) for i in (0, 1))
        )
    return sides[0], sides[1]


def _naive_level(node: np.ndarray, a: int, b: int) -> int | None:
    """The first level (deepest first) at which codes ``a`` and ``b`` have one node."""
    shared = [at for at in range(node.shape[0]) if node[at, a] != -1 and node[at, a] == node[at, b]]
    return min(shared) if shared else None


def _naive_nearest(docs: list, node: np.ndarray) -> tuple[list[int], list[int]]:
    """Each miss's and each wrong code's nearest level over its document's other side (-1:
    none), in :func:`_sides`' order."""
    ranks: tuple[list[int], list[int]] = ([], [])
    for fn, fp in docs:
        for side, mine, theirs in ((0, fn, fp), (1, fp, fn)):
            for code in mine:
                found = [
                    level
                    for other in theirs
                    if (
                        level := _naive_level(
                            node, *((code, other) if side == 0 else (other, code))
                        )
                    )
                    is not None
                ]
                ranks[side].append(min(found) if found else -1)
    return ranks


def _naive_pair_counts(docs: list, node: np.ndarray, deepest: int) -> list[tuple]:
    """``(gold, predicted, level, documents)`` of every pair of a document's miss and wrong
    code meeting at ``deepest`` or before, counted over the documents, sorted."""
    counts: Counter = Counter()
    for fn, fp in docs:
        for gold in fn:
            for wrong in fp:
                level = _naive_level(node, gold, wrong)
                if level is not None and level <= deepest:
                    counts[gold, wrong, level] += 1
    return sorted((g, w, level, n) for (g, w, level), n in counts.items())


CASES = [(seed, tree) for seed in range(6) for tree in (True, False)]


@pytest.mark.parametrize(("seed", "tree"), CASES)
def test_near_pair_counts_match_the_naive_count(seed, tree):
    """Every deepest level, with the naive nearest levels handed in: the same pairs, levels
    and numbers of documents, in order of gold code, then predicted code."""
    rng = np.random.default_rng(seed)
    codes = int(rng.integers(3, 14))
    node = _random_nodes(rng, codes=codes, levels=int(rng.integers(2, 6)), tree=tree)
    docs = _random_documents(rng, documents=int(rng.integers(0, 60)), codes=codes)
    fn, fp = _sides(docs)
    for deepest in range(node.shape[0]):
        got = errors_compiled.near_pair_counts(fn, fp, node, deepest)
        assert all(column.dtype == np.int64 for column in got)
        assert list(zip(*(c.tolist() for c in got), strict=True)) == _naive_pair_counts(
            docs, node, deepest
        )


@pytest.mark.parametrize(("seed", "tree"), CASES)
def test_nearest_levels_match_the_naive_ones(seed, tree):
    """The nearest levels, found in the pass that writes the pairs, alone and with them."""
    rng = np.random.default_rng(100 + seed)
    codes = int(rng.integers(3, 14))
    node = _random_nodes(rng, codes=codes, levels=int(rng.integers(2, 6)), tree=tree)
    docs = _random_documents(rng, documents=int(rng.integers(0, 60)), codes=codes)
    fn, fp = _sides(docs)
    expected = list(_naive_nearest(docs, node))
    assert [r.tolist() for r in errors_compiled.nearest(fn, fp, node)] == expected
    for deepest in range(node.shape[0]):
        *got, _ = errors_compiled.nearest_and_pair_keys(fn, fp, node, deepest)
        assert [r.tolist() for r in got] == expected


def test_more_pairs_than_the_first_array_holds():
    """Documents of 40 misses and 40 wrong codes, all near: 1,600 pairs each, more than the
    kernel's first array of keys holds (1,024 or one per miss), so the pass stops before a
    document and a longer array takes the rest; the counts are the naive ones."""
    rng = np.random.default_rng(9)
    node = np.array([np.arange(100) // 50, np.zeros(100, int), np.full(100, -1)], dtype=np.int64)
    docs = []
    for _ in range(7):
        chosen = rng.permutation(100)[:80]
        docs.append((sorted(chosen[:40].tolist()), sorted(chosen[40:].tolist())))
    docs.insert(3, ([], []))
    fn, fp = _sides(docs)
    for deepest in (0, 1):
        got = errors_compiled.near_pair_counts(fn, fp, node, deepest)
        assert list(zip(*(c.tolist() for c in got), strict=True)) == _naive_pair_counts(
            docs, node, deepest
        )
    _, _, keys = errors_compiled.nearest_and_pair_keys(fn, fp, node, 1)
    assert keys.size == 7 * 1600


def test_pairs_repeat_over_documents():
    """Hand-worked: one pair in three documents, another in one; a far pair and a document
    without wrong codes count nothing. Levels: 0 (same leaf group), 1, 2 (root: no node)."""
    node = np.array([[0, 0, 1, 2], [0, 0, 0, 1], [-1, -1, -1, -1]], dtype=np.int64)
    docs = [([0], [1]), ([0], [1, 3]), ([0, 2], [1]), ([2], []), ([3], [2])]
    fn, fp = _sides(docs)
    got = errors_compiled.near_pair_counts(fn, fp, node, 1)
    # (0, 1) at level 0 in docs 0, 1, 2; (2, 1) at level 1 in doc 2; (0, 3), (3, 2) never meet.
    assert [c.tolist() for c in got] == [[0, 2], [1, 1], [0, 1], [3, 1]]
    only_leaf = errors_compiled.near_pair_counts(fn, fp, node, 0)
    assert [c.tolist() for c in only_leaf] == [[0], [1], [0], [3]]


def test_no_errors_no_pairs():
    empty = np.zeros(0, dtype=np.int64)
    node = np.zeros((2, 3), dtype=np.int64)
    got = errors_compiled.near_pair_counts((empty, empty), (empty, empty), node, 1)
    assert [c.size for c in got] == [0, 0, 0, 0]


@pytest.mark.parametrize("seed", range(4))
def test_unmatched_split_into_document_and_code(seed):
    """Sorted keys (document, code, flag) with repeats, documents with gold labels only,
    predicted labels only, both, and numbers skipped (empty documents): a label on one side
    of its document only is a miss (gold) or a wrong code (predicted), split as the keys were
    built."""
    rng = np.random.default_rng(seed)
    one_side = {1: ((0,),), 2: ((1,),), 3: ((0,), (1,), (0, 1))}  # gold, predicted, either
    labels = set()
    for doc in range(int(rng.integers(0, 40))):
        shape = int(rng.integers(0, 4))
        if shape == 0:
            continue  # an empty document: its number skipped
        for code in rng.integers(0, 30, size=int(rng.integers(1, 6))).tolist():
            flags = one_side[shape][rng.integers(0, len(one_side[shape]))]
            labels.update((doc, code, flag) for flag in flags)
    repeats = rng.integers(1, 3, size=len(labels))  # a label listed twice counts once
    keys = np.sort(
        np.repeat(
            np.array([d << DOC_SHIFT | c << 1 | f for d, c, f in labels], dtype=np.int64),
            repeats,
        )
    )
    fn, fp = errors_compiled.unmatched(keys)
    expected_fn = sorted((d, c) for d, c, f in labels if f == 0 and (d, c, 1) not in labels)
    expected_fp = sorted((d, c) for d, c, f in labels if f == 1 and (d, c, 0) not in labels)
    assert list(zip(*(a.tolist() for a in fn), strict=True)) == expected_fn
    assert list(zip(*(a.tolist() for a in fp), strict=True)) == expected_fp
    assert all(a.dtype == np.int64 and a.flags.owndata for a in (*fn, *fp))


@pytest.mark.parametrize("seed", range(4))
def test_cell_counts_equal_the_group_by(seed):
    """``errors.parquet``'s cells counted with NumPy: the group-by they replace, row for row
    once sorted, types and all; cells without errors absent."""
    rng = np.random.default_rng(seed)
    levels = int(rng.integers(2, 7))
    tree = type("T", (), {"lca_levels": tuple(range(levels))})()
    n = int(rng.integers(0, 500))
    rows = pl.DataFrame(
        {
            "doc": rng.integers(0, 50, n),
            "kind": rng.integers(0, 2, n).astype(np.uint8),
            "lca_level": rng.integers(0, levels, n).astype(np.uint8),
            "code_status": rng.choice([0, 3], n).astype(np.uint8),  # statuses 1 and 2: none
        }
    )
    got = _cell_counts(rows, tree)
    expected = rows.group_by(*CELL).agg(pl.len().alias("count")).sort(CELL)
    assert got.schema == expected.schema
    assert got.sort(CELL).equals(expected)
    assert got["code_status"].is_in([1, 2]).sum() == 0
