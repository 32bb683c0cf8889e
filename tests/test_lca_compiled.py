"""LCA-F's compiled kernel (:mod:`hieval.engine.lca_compiled`, issue 36's speed-up) against the
naive reference of ``test_lca_f`` (plain Python over sets, from the paper's definition) and
against the vectorised version, to the last integer of every document's sums."""

from __future__ import annotations

import numpy as np
import pytest
from test_lca_f import (
    HAND_WORKED,
    PARENT,
    hieval_lca_f,
    naive_lca_f,
    random_labels,
    random_tree,
    tree,
)
from test_suite import frame

from hieval.engine import keys, lca
from hieval.engine.driver import evaluate
from hieval.engine.icm import IcmParams


@pytest.fixture
def compiled(monkeypatch):
    """Every slice, however small, through the compiled kernel."""
    monkeypatch.setattr(lca, "COMPILED_FROM_LABELS", 0)


@pytest.mark.parametrize("seed", range(8))
def test_compiled_lca_f_matches_the_naive_reference(compiled, seed):
    rng = np.random.default_rng(seed)
    parent = random_tree(rng)
    nodes = sorted(parent)
    gold, pred = random_labels(rng, nodes, 40), random_labels(rng, nodes, 40)
    for d in list(gold)[:4]:  # near misses, as in test_lca_f
        pred[d] = sorted(set(gold[d]) | {parent[c] for c in gold[d] if parent[c]})
    expected = [naive_lca_f(set(gold[d]), set(pred[d]), parent) for d in gold]
    got = hieval_lca_f(tree(parent), gold, pred)
    assert got == pytest.approx(sum(expected) / len(expected), abs=1e-12)


@pytest.mark.parametrize(("case", "gold", "pred", "expected"), HAND_WORKED, ids=lambda x: x)
def test_compiled_lca_f_hand_worked(compiled, case, gold, pred, expected):
    assert hieval_lca_f(tree(PARENT), {"x": gold}, {"x": pred}) == pytest.approx(expected)


def _item_sums(table, gold: dict, pred: dict):
    result = evaluate(
        frame(gold), frame(pred), table.ancestors(), levels=table.levels,
        evaluated=table.levels[:-1], params=IcmParams(),
    )  # fmt: skip
    return result.item_sums


@pytest.mark.parametrize("chunk", [7, 10_000])
def test_compiled_sums_equal_the_vectorised_ones(monkeypatch, chunk):
    """Many documents, slices cut anywhere (``chunk`` labels): every per-document LCA-F sum
    (and every other item sum) equal to the vectorised version's."""
    rng = np.random.default_rng(5)
    parent = random_tree(rng)
    nodes = sorted(parent)
    gold, pred = random_labels(rng, nodes, 300), random_labels(rng, nodes, 300)
    table = tree(parent)
    monkeypatch.setattr(keys, "LABELS_PER_CHUNK", chunk)
    vectorised = _item_sums(table, gold, pred)
    monkeypatch.setattr(lca, "COMPILED_FROM_LABELS", 0)
    assert _item_sums(table, gold, pred).equals(vectorised)
    assert {"lca_pred", "lca_gold", "lca_both"} <= set(vectorised.columns)
    assert vectorised["lca_both"].sum() > 0


def test_the_kernel_loads_in_the_background():
    thread = lca.prefetch_compiled()
    thread.join(timeout=120)
    assert not thread.is_alive()
