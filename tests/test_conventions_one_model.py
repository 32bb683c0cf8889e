"""With one model there is no pair for Edin et al.'s McNemar test: its decisions are not
built (they were half of the conventions' time at 100x MIMIC-III), and the tests table is
written empty, as before; with two models they are built and each pair is tested."""

from __future__ import annotations

import polars as pl
import pytest

import hieval.conventions.stage as stage
from hieval.cli import main

GOLD = "doc_id,code\na,401.9\na,428.0\nb,250.00\nb,38.93\nc,E849.7\nc,401.9\nd,486\n"
PRED = (
    "doc_id,code,score\na,401.9,0.9\na,428.0,0.4\na,486,0.5\nb,250.00,0.7\nb,38.93,0.2\n"
    "c,E849.7,0.6\nc,427.31,0.55\nd,486,0.8\nd,401.9,0.3\n"
)


@pytest.fixture
def built(monkeypatch):
    """The models whose McNemar decisions were built."""
    calls = []
    decisions = stage._edin_decisions

    def counting(decided, *args, **kwargs):
        calls.append(decided.height)
        return decisions(decided, *args, **kwargs)

    monkeypatch.setattr(stage, "_edin_decisions", counting)
    return calls


def _run(tmp_path, models: int):
    gold, pred = tmp_path / "gold.csv", tmp_path / "pred.csv"
    gold.write_text(GOLD)
    pred.write_text(PRED)
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(gold), "--out", str(out), "--cache", str(tmp_path / "c")]
    for i in range(models):
        argv += ["--pred", f"m{i}={pred}"]
    assert main(argv) == 0
    return pl.read_parquet(out / "conventions_tests.parquet")


def test_one_model_builds_no_mcnemar_decisions(tmp_path, built):
    tests = _run(tmp_path, models=1)
    assert built == []
    assert tests.height == 0
    assert tests.columns[:2] == ["model_a", "model_b"]


def test_two_models_are_tested(tmp_path, built):
    tests = _run(tmp_path, models=2)
    assert len(built) == 2
    assert tests.select("model_a", "model_b").rows() == [("m0", "m1")]
    assert tests["p_value"].item() == 1.0  # the same decisions: no discordant pair
