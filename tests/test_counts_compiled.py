"""The count engine's compiled per-level counts (:mod:`hieval.engine.counts_compiled`, issue
36's speed-up) against the naive reference of ``test_counts_reference`` (plain Python over
sets and the level table's rows) and against the vectorised version, to the last count."""

from __future__ import annotations

import pytest

# The reference's module-scoped random dataset (a fixture: its tests take it by name).
from test_counts_reference import (
    LEVELS,
    MODELS,
    dataset,  # noqa: F401
    doc_dict,
    naive_counts,
    node_dict,
    to_frame,
)

from hieval.engine import counts, groups
from hieval.engine.driver import count


@pytest.fixture
def compiled(monkeypatch):
    """Every slice, however small, grouped and counted by the compiled kernels."""
    monkeypatch.setattr(counts, "COMPILED_FROM_LABELS", 0)
    monkeypatch.setattr(groups, "COMPILED_RUNS_FROM", 0)


@pytest.mark.parametrize("model", MODELS)
def test_compiled_counts_match_the_naive_reference(compiled, model, dataset, icd9_ancestors):  # noqa: F811
    nodes, docs = count(to_frame(dataset["gold"]), dataset["frames"][model], icd9_ancestors, LEVELS)
    expected_nodes, expected_docs = naive_counts(
        dataset["gold"], dataset["models"][model], dataset["anc"]
    )
    assert node_dict(nodes) == expected_nodes
    assert nodes.height == len(expected_nodes)
    assert doc_dict(docs) == expected_docs


@pytest.mark.parametrize("model", ["sibling", "over", "drop"])
def test_compiled_tables_equal_the_vectorised_ones(model, dataset, icd9_ancestors, monkeypatch):  # noqa: F811
    """The same tables, row for row and type for type (several slices: the per-document rows
    of each are placed by the slice's first document)."""
    monkeypatch.setattr("hieval.engine.keys.LABELS_PER_CHUNK", 200)
    args = (to_frame(dataset["gold"]), dataset["frames"][model], icd9_ancestors, LEVELS)
    vectorised = count(*args)
    monkeypatch.setattr(counts, "COMPILED_FROM_LABELS", 0)
    monkeypatch.setattr(groups, "COMPILED_RUNS_FROM", 0)
    fast = count(*args)
    assert fast[0].equals(vectorised[0])
    assert fast[1].equals(vectorised[1])


@pytest.mark.parametrize("seed", range(6))
def test_compiled_icm_matches_the_naive_recursion(compiled, seed):
    """ICM from the compiled item sums against test_icm's plain recursion of the paper."""
    from test_icm import naive_icm, random_problem
    from test_icm import run as icm_of

    edges, _, gold, pred = random_problem(seed)
    assert icm_of(gold, pred, edges)["icm"] == pytest.approx(naive_icm(gold, pred, edges), abs=1e-9)


@pytest.mark.parametrize("model", ["sibling", "over", "random", "empty"])
def test_compiled_item_sums_equal_the_vectorised_ones(
    model,
    dataset,  # noqa: F811
    icd9,
    icd9_ancestors,
    monkeypatch,
):
    """Every per-item sum (ICM, HF, PROP-F, LCA-F), to the last integer, over many slices."""
    from hieval.engine.driver import evaluate

    monkeypatch.setattr("hieval.engine.keys.LABELS_PER_CHUNK", 200)
    args = (to_frame(dataset["gold"]), dataset["frames"][model], icd9_ancestors)
    levels = icd9.levels

    def sums():
        return evaluate(*args, levels=levels, evaluated=LEVELS).item_sums

    vectorised = sums()
    monkeypatch.setattr(counts, "COMPILED_FROM_LABELS", 0)
    fast = sums()
    assert fast.equals(vectorised)
    assert fast.height == len(dataset["gold"])


@pytest.mark.parametrize("seed", range(8))
def test_compiled_runs_are_the_vectorised_runs(seed):
    """A slice's groups at an unbroken level from the compiled pass, array for array and type
    for type, against :meth:`Slice._runs`: documents of one label and of many, codes without a
    node (-1) between, before and after named ones, and runs of one node across documents."""
    import numpy as np

    from hieval.engine.counts_compiled import level_runs
    from hieval.engine.keys import DOC_SHIFT

    rng = np.random.default_rng(seed)
    n_codes = int(rng.integers(1, 40))
    node_of = rng.integers(-1, 6, n_codes).astype(np.int32)  # about one code in seven unnamed
    labels = int(rng.integers(0, 3000))
    doc = np.sort(rng.integers(0, int(rng.integers(1, 400)), labels))
    code = rng.integers(0, n_codes, labels)
    pred = rng.integers(0, 2, labels)
    keys = np.unique((doc << DOC_SHIFT) | (code << 1) | pred)
    part = groups.Slice(0, int(doc.max(initial=0)) + 1, keys, space=None)
    expected = part._runs(node_of.take(part.code))
    found = level_runs(part.doc, part.code, part.pred, node_of)
    for want, got in zip(
        (expected.doc, expected.node, expected.pred, expected.gold), found, strict=True
    ):
        assert got.dtype == np.int64
        assert np.array_equal(got, want)
