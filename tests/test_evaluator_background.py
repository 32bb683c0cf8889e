"""hieval.Evaluator counts a batch in the background while the next one is normalised (issue
31's speed): a batch whose counting fails is dropped as a refused batch is, the error is raised
at the next call, and the batches before it give what one evaluate of them gives."""

from __future__ import annotations

import pytest
from polars.testing import assert_frame_equal

import hieval
from hieval import evaluator as evaluator_module

GOLD = {"a": ["401.9"], "b": ["250.00", "428.0"], "c": ["038.9"]}
PRED = {"a": ["401.9"], "b": ["250.00"], "c": ["428.0"]}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def failing_on(monkeypatch, batch_folder: str) -> None:
    """The engine refuses the batch normalised into ``batch_folder`` (as its limits would)."""
    count = evaluator_module.Evaluator._count

    def refusing(self, name, config, *, folder):
        if folder.parent.parent.name == batch_folder:
            raise hieval.InputError("more than 8388608 distinct codes cannot be counted")
        return count(self, name, config, folder=folder)

    monkeypatch.setattr(evaluator_module.Evaluator, "_count", refusing)


@pytest.mark.parametrize("raised_by", ["update", "compute"])
def test_a_batch_whose_count_fails_is_dropped_and_the_error_raised(cache, monkeypatch, raised_by):
    failing_on(monkeypatch, "batch-2")
    evaluator = hieval.Evaluator(cache=cache)
    evaluator.update({"a": GOLD["a"]}, {"m": {"a": PRED["a"]}})
    evaluator.update({"b": GOLD["b"]}, {"m": {"b": PRED["b"]}})  # counted in the background
    with pytest.raises(hieval.InputError, match="distinct codes cannot be counted"):
        if raised_by == "update":
            evaluator.update({"c": GOLD["c"]}, {"m": {"c": PRED["c"]}})
        else:
            evaluator.compute()
    # Batch 2 (and the batch whose update raised) are gone; batch 1 stands, and "b" may come again.
    assert sorted(p.name for p in evaluator._folder.iterdir()) == ["batch-1", "hierarchy"]
    monkeypatch.undo()
    evaluator.update({d: GOLD[d] for d in "bc"}, {"m": {d: PRED[d] for d in "bc"}})
    ours = evaluator.compute()
    whole = hieval.evaluate(GOLD, {"m": PRED}, cache=cache)
    assert_frame_equal(ours.metrics, whole.metrics, check_exact=True)
    assert_frame_equal(ours.nodes, whole.nodes, check_exact=True)


def test_a_first_batch_whose_count_fails_leaves_nothing_behind(cache, monkeypatch):
    failing_on(monkeypatch, "batch-1")
    evaluator = hieval.Evaluator(cache=cache)
    evaluator.update({"a": GOLD["a"]}, {"m": {"a": PRED["a"]}})
    with pytest.raises(hieval.InputError, match="distinct codes cannot be counted"):
        evaluator.compute()
    monkeypatch.undo()
    with pytest.raises(hieval.InputError, match="no batch yet"):
        evaluator.compute()
    evaluator.update(GOLD, {"x": PRED})  # another model: the first batch's settings are gone
    assert evaluator.compute().models == ["x"]
