"""The error analysis runs beside the counting (``hieval.run.evaluate_into``): it starts on a
model's labels once its count has encoded them, reads its node counts only once they are
written, and stops with the count when the count fails (no hang, the count's own error
reported)."""

from __future__ import annotations

import threading

import pytest

import hieval
import hieval.analysis_stage
import hieval.pipeline
import hieval.run
from hieval.errors import HievalError

GOLD = {"d1": ["A1x", "B1x"], "d2": ["A1x"], "d3": ["B1y"]}
PRED = {"d1": ["A1y", "A2x"], "d2": ["A1x", "B1y"], "d3": []}


@pytest.fixture
def tree(tmp_path):
    path = tmp_path / "tree.csv"
    path.write_text(
        "child,parent\nA,\nB,\nA1,A\nA2,A\nB1,B\nA1x,A1\nA1y,A1\nA2x,A2\nB1x,B1\nB1y,B1\n"
    )
    return path


def _evaluate(tree, tmp_path):
    return hieval.evaluate(GOLD, {"m": PRED}, hierarchy=tree, cache=tmp_path / "cache")


def test_the_analysis_starts_before_the_count_ends(tree, tmp_path, monkeypatch):
    """The count, once its labels are encoded, waits (up to 20 s) for the analysis to begin on
    them: it begins at once when they overlap; run one after the other, it could not begin
    until the count returned."""
    started = threading.Event()
    seen_during_count = []
    errors_of, evaluate_labels = hieval.analysis_stage.errors_of, hieval.pipeline.evaluate_labels

    def analysing(*args, **kwargs):
        started.set()
        return errors_of(*args, **kwargs)

    def counting(*args, **kwargs):
        seen_during_count.append(started.wait(timeout=20))
        return evaluate_labels(*args, **kwargs)

    monkeypatch.setattr(hieval.analysis_stage, "errors_of", analysing)
    monkeypatch.setattr(hieval.pipeline, "evaluate_labels", counting)
    evaluation = _evaluate(tree, tmp_path)
    assert seen_during_count == [True]
    # The per-code table, read from the counted nodes, is the one worked by hand
    # (test_error_analysis.test_a_users_tree_by_hand).
    a = evaluation.codes["m"].filter(code="A").row(0, named=True)
    assert (a["level"], a["tp"], a["fp"], a["fn"]) == ("d1", 2, 0, 0)


def test_a_failed_count_stops_the_analysis(tree, tmp_path, monkeypatch):
    """A count that fails is reported as itself, and the analysis waiting for its nodes stops
    (the evaluation returns instead of waiting forever)."""

    def failing(**kwargs):
        raise HievalError("the count failed here")

    monkeypatch.setattr(hieval.run, "count_and_score", failing)
    outcome: list[BaseException | None] = []

    def run():
        try:
            _evaluate(tree, tmp_path)
            outcome.append(None)
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the evaluation hung on the failed count"
    assert isinstance(outcome[0], HievalError)
    assert "the count failed here" in str(outcome[0])
