"""hieval.Evaluator.compute runs the error analysis beside the count reduction (as one evaluate
runs it beside the counting): a failure on either side is raised by compute, never lost, and
neither side is left waiting for the other."""

from __future__ import annotations

import threading

import pytest

import hieval
from hieval import evaluator as evaluator_module
from hieval import run

GOLD = {"a": ["401.9"], "b": ["250.00", "428.0"], "c": ["038.9"]}
PRED = {"a": ["401.9"], "b": ["250.00"], "c": ["428.0"]}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def _evaluator(cache) -> hieval.Evaluator:
    evaluator = hieval.Evaluator(cache=cache)
    for doc in GOLD:
        evaluator.update({doc: GOLD[doc]}, {"m": {doc: PRED[doc]}})
    return evaluator


def test_a_failing_error_analysis_is_raised_by_compute(cache, monkeypatch):
    def failing(**kwargs):
        raise RuntimeError("the error analysis failed")

    monkeypatch.setattr(run, "error_analysis", failing)
    with pytest.raises(RuntimeError, match="the error analysis failed"):
        _evaluator(cache).compute()


def test_a_failing_reduction_is_raised_and_the_analysis_waiting_for_it_stops(cache, monkeypatch):
    """The analysis waits for the reduced node counts; the reduction fails: compute raises
    the reduction's error and returns (no thread left waiting for counts that never come)."""

    def failing(self, name, *, params, out):
        raise hieval.InputError("the reduction failed")

    monkeypatch.setattr(evaluator_module.Evaluator, "_reduced", failing)
    evaluator, raised = _evaluator(cache), []

    def compute() -> None:
        try:
            evaluator.compute()
        except hieval.InputError as exc:
            raised.append(str(exc))

    computing = threading.Thread(target=compute, daemon=True)
    computing.start()
    computing.join(timeout=120)
    assert not computing.is_alive(), "compute still waits after its reduction failed"
    assert raised == ["the reduction failed"]


def test_compute_after_a_failed_analysis_equals_one_evaluate(cache, monkeypatch):
    """A second Evaluator, the analysis working again, gives one evaluate's tables."""
    expected = hieval.evaluate(GOLD, {"m": PRED}, cache=cache)
    got = _evaluator(cache).compute()
    assert got.metrics.equals(expected.metrics)
    assert got.errors.equals(expected.errors)
