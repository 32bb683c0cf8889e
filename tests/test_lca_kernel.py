"""LCA-F's compiled kernel (:func:`hieval.engine.lca_compiled.slice_lca_sums`) called directly,
slice by slice, against the vectorised version (:func:`hieval.engine.lca.vectorised_lca_sums`,
numpy over all entries at once, nothing shared with the kernel): every per-document integer.

Why beside ``test_lca_compiled``: the kernel lays the chains out per slice, decides a label's
own node, pairs and holds label by label, and lets an exact hit skip its LCA search; these
cases reach each of those paths alone: documents with labels on one side only, deep chains,
labels at inner nodes (a code and its ancestor in one set), codes placed nowhere, repeated
labels, and arbitrary chains (not a tree: several nodes of a chain at one depth, roots
anywhere)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from test_lca_f import random_labels, random_tree, tree
from test_suite import frame

from hieval.engine.groups import slices
from hieval.engine.keys import CodeSpace, encode
from hieval.engine.lca import node_depths, vectorised_lca_sums
from hieval.engine.lca_compiled import slice_lca_sums


def _both(part, depth) -> tuple[np.ndarray, np.ndarray]:
    """The compiled and the vectorised sums of one slice, over the slice's documents."""
    got = slice_lca_sums(part.doc, part.code, part.pred, space=part.space, depth=depth)
    expected = vectorised_lca_sums(part, depth)
    return np.pad(got, ((0, 0), (0, expected.shape[1] - got.shape[1]))), expected


def _tree_sums(parent: dict, gold: dict, pred: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per slice of the labels encoded over ``parent``'s tree, both versions' sums."""
    table = tree(parent)
    space = CodeSpace.build(table.ancestors(), tuple(table.levels))
    labels = encode(frame(gold), frame(pred), space)
    depth = node_depths(labels.space)
    return [_both(part, depth) for part in slices(labels)]


def _assert_equal(pairs) -> np.ndarray:
    for got, expected in pairs:
        np.testing.assert_array_equal(got, expected)
    return np.concatenate([expected for _, expected in pairs], axis=1)


@pytest.mark.parametrize("side", ["gold", "pred"])
def test_documents_with_labels_on_one_side_only(side):
    """No pairing at all: each kept label's own node, the root left out."""
    rng = np.random.default_rng(3)
    parent = random_tree(rng)
    labels = random_labels(rng, sorted(parent), 50)
    empty = {d: [] for d in labels}
    gold, pred = (labels, empty) if side == "gold" else (empty, labels)
    sums = _assert_equal(_tree_sums(parent, gold, pred))
    row = 1 if side == "gold" else 0
    assert sums[row].sum() > 0
    assert not sums[1 - row].any() and not sums[2].any()


def test_deep_chains():
    """Two branches 40 and 25 deep off one trunk: LCAs far from the labels, long holds."""
    parent = {"N0": None}
    for i in range(1, 40):
        parent[f"N{i}"] = f"N{i - 1}"
    parent["M10"] = "N9"
    for i in range(11, 35):
        parent[f"M{i}"] = f"M{i - 1}"
    gold = {"a": ["N39"], "b": ["N39", "M34"], "c": ["N20"], "d": ["M34"]}
    pred = {"a": ["M34"], "b": ["N30"], "c": ["N39", "M11"], "d": ["N0"]}
    sums = _assert_equal(_tree_sums(parent, gold, pred))
    # a: N39 (depth 40) and M34 (depth 35) meet at N9 (depth 10): 31 and 26 nodes held.
    assert sums[:, 0].tolist() == [26, 31, 1]


def test_labels_at_inner_nodes():
    """A user's tree labelled at every level: a code with its ancestor in one set (the
    ancestor dropped), a code and its ancestor on different sides (an exact pairing up)."""
    rng = np.random.default_rng(8)
    parent = random_tree(rng)
    inner = sorted({p for p in parent.values() if p})
    gold = {f"d{i}": [c, parent[c]] for i, c in enumerate(sorted(parent)) if parent[c]}
    pred = {
        d: [codes[1]] if int(d[1:]) % 2 else list(rng.choice(inner, 2)) for d, codes in gold.items()
    }
    sums = _assert_equal(_tree_sums(parent, gold, pred))
    assert sums[2].sum() > 0


@pytest.mark.parametrize("seed", range(6))
def test_random_trees_many_slices(seed):
    """Random trees and label sets, slices of a few documents each."""
    rng = np.random.default_rng(100 + seed)
    parent = random_tree(rng)
    nodes = sorted(parent)
    gold, pred = random_labels(rng, nodes, 120), random_labels(rng, nodes, 120)
    gold["d00"], pred["d01"] = [], []
    _assert_equal(_tree_sums(parent, gold, pred))


def _arbitrary_space(rng: np.random.Generator, n_codes: int, n_nodes: int):
    """Chains that need not form a tree: each code's chain a random set of nodes (in node order,
    as :class:`~hieval.engine.keys.CodeSpace` lists them), some empty; random depths, with
    ties within a chain; random roots."""
    chains = [
        np.sort(rng.choice(n_nodes, int(rng.integers(0, 7)), replace=False)) for _ in range(n_codes)
    ]
    anc_ptr = np.zeros(n_codes + 1, dtype=np.int64)
    anc_ptr[1:] = np.cumsum([c.size for c in chains])
    space = SimpleNamespace(
        anc_ptr=anc_ptr,
        anc_node=np.concatenate(chains).astype(np.int64),
        is_root=rng.random(n_nodes) < 0.2,
        tree_nodes=pl.Series(np.arange(n_nodes)),
    )
    depth = rng.integers(0, 6, n_nodes).astype(np.int32)
    return space, depth


@pytest.mark.parametrize("seed", range(40))
def test_arbitrary_chains_and_repeated_labels(seed):
    """The same steps on any chains, not only a tree's: the label's own node is the last of
    its chain at its depth, as the vectorised version decides; repeated labels (never from the
    encoder, which drops repeats) are grouped alike."""
    rng = np.random.default_rng(seed)
    space, depth = _arbitrary_space(rng, n_codes=30, n_nodes=25)
    n = 600
    doc = np.sort(rng.integers(0, 60, n)).astype(np.int64)
    code = rng.integers(0, 30, n).astype(np.int64)
    pred = rng.integers(0, 2, n).astype(np.int64)
    part = SimpleNamespace(doc=doc, code=code, pred=pred, n_docs=int(doc[-1]) + 1, space=space)
    got, expected = _both(part, depth)
    np.testing.assert_array_equal(got, expected)
    assert expected[2].sum() > 0
