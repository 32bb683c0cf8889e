"""The error analysis's compiled pairing (:mod:`hieval.analysis.errors_compiled`, issue 36's
speed-up) against the naive reference of ``test_error_analysis`` (plain Python over sets and
the package tree) and against the vectorised version it replaces for large inputs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from test_error_analysis import (
    designed_zoo,
    frame_of,
    naive_ancestors,
    naive_confusions,
    naive_errors,
)

import hieval
from hieval.analysis import errors, errors_compiled
from hieval.analysis.tree import tree_of
from hieval.engine.keys import DOC_SHIFT


@pytest.fixture
def compiled(monkeypatch):
    """Every model, however small, paired by the compiled kernels."""
    monkeypatch.setattr(errors, "COMPILED_FROM_LABELS", 0)


@pytest.mark.parametrize("seed", [3, 4])
def test_compiled_pairing_matches_the_naive_reference(
    compiled, icd9, icd9_ancestors, seed, tmp_path
):
    up = naive_ancestors(icd9_ancestors)
    gold, models, placed = designed_zoo(icd9, up, seed=seed, documents=80)
    evaluation = hieval.evaluate(
        frame_of(gold),
        {name: frame_of(sets) for name, sets in models.items()},
        cache=tmp_path / "cache",
    )
    assert_naive_tables(evaluation, gold, models, up, placed)
    assert evaluation.confusions["near"].height > 0


def assert_naive_tables(evaluation, gold, models, up, placed) -> None:
    """Each model's error distance counts and confusions equal the naive reference's."""
    for name, pred in models.items():
        rows = evaluation.errors.filter(model=name)
        got = {(k, lv, s): c for k, lv, s, c in rows.select(rows.columns[1:5]).iter_rows()}
        assert got == dict(naive_errors(gold, pred, up, placed))
        pairs = {(a, b, lv): n for a, b, lv, n in evaluation.confusions[name].iter_rows()}
        assert pairs == dict(naive_confusions(gold, pred, up))


def _model_errors(icd9, icd9_ancestors, gold, pred):
    def tree_for(codes):
        return tree_of(icd9, icd9_ancestors, codes, {})

    return errors.model_errors(frame_of(gold), frame_of(pred), tree_for)


@pytest.mark.parametrize("seed", [5, 6])
def test_compiled_steps_match_the_vectorised_ones(icd9, icd9_ancestors, seed, monkeypatch):
    """Step by step: the unmatched keys, each error's nearest level and the near pairs."""
    up = naive_ancestors(icd9_ancestors)
    gold, models, _ = designed_zoo(icd9, up, seed=seed, documents=120)
    for pred in models.values():
        vectorised = _model_errors(icd9, icd9_ancestors, gold, pred)
        assert not vectorised.compiled
        monkeypatch.setattr(errors, "COMPILED_FROM_LABELS", 0)
        fast = _model_errors(icd9, icd9_ancestors, gold, pred)
        monkeypatch.undo()
        assert fast.compiled
        for a, b in zip((*vectorised.fn, *vectorised.fp), (*fast.fn, *fast.fp), strict=True):
            np.testing.assert_array_equal(a, b)
        for kind in errors.KINDS:
            np.testing.assert_array_equal(vectorised.nearest(kind), fast.nearest(kind))
        for deepest in range(len(fast.tree.levels)):
            expected = errors.near_pairs(vectorised, deepest)
            got = errors.near_pairs(fast, deepest)
            order = ["doc", "gold_code", "predicted_code"]
            assert got.sort(order).equals(expected.sort(order).select(got.columns))


def test_unmatched_keys_with_repeats():
    """Sorted keys (document, code, flag bit) with repeated labels: a label on both sides is
    matched however often each side repeats it; the others are misses (flag 0) or wrong
    codes (flag 1), each once."""
    rng = np.random.default_rng(0)
    keys = np.sort(rng.integers(0, 4000, size=20_000)).astype(np.int64)  # many repeats
    fn, fp = errors_compiled.unmatched(keys)
    labels = set(keys.tolist())
    expected_fn = sorted(k for k in labels if not k & 1 and k | 1 not in labels)
    expected_fp = sorted(k for k in labels if k & 1 and k ^ 1 not in labels)
    # Each key split as the count engine splits its keys: document, code.
    assert [d << DOC_SHIFT | c << 1 for d, c in zip(*fn, strict=True)] == expected_fn
    assert [d << DOC_SHIFT | c << 1 | 1 for d, c in zip(*fp, strict=True)] == expected_fp
    assert all(part.size == 0 for part in errors_compiled.unmatched(np.zeros(0, np.int64))[0])


def test_a_frame_of_pairs_is_typed_as_the_vectorised_one():
    node = np.array([[0, 0, 1], [-1, -1, -1]], dtype=np.int64)
    pairs = errors_compiled.near_pairs(
        (np.array([0]), np.array([0])), (np.array([0, 0]), np.array([1, 2])), node, 0
    )
    assert pairs.tolist() == [[0], [0], [1], [0]]
    assert pl.DataFrame({"x": pairs[0]}).dtypes == [pl.Int64]
