"""A dense model's bootstrap units computed in the score stage's reads of its matrix and kept
for the intervals (issue 36: five MIMIC-IV-sized models with ``--bootstrap 200`` read and
ranked each matrix twice): the intervals and comparisons from the kept units equal, bit for
bit, those from units computed again in the uncertainty stage (today's path, which
tests/test_dense_wiring.py and tests/test_auc_uncapped.py check against the long path and an
independent Mann-Whitney); the matrix is ranked once a model instead of twice; and kept units
are used only for the inputs and settings they were computed for."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval import cli, pipeline
from hieval.metrics import blocked, blocked_rows
from hieval.metrics.uncertainty import ranking as uncertainty_ranking
from hieval.metrics.uncertainty import tables
from hieval.metrics.uncertainty.ranking import RankingUnits
from hieval.metrics.uncertainty.unit_files import load_units, save_units, units_plan
from tests.test_auc_uncapped import _dense_zoo
from tests.test_dense_wiring import _same_bits

OUTPUTS = ("metrics", "intervals", "comparisons")


def _evaluate(monkeypatch, folder, gold, matrices, name: str, *, compute_again: bool) -> dict:
    """An evaluation of the zoo above the (lowered) AUC cap, with ``--bootstrap 30``; with
    ``compute_again`` the kept units are ignored (today's path). Its outputs, and how often
    the matrices were ranked (:func:`hieval.metrics.blocked.blocked_levels`)."""
    for module in (uncertainty_ranking, blocked_rows, tables):
        monkeypatch.setattr(module, "AUC_MAX_SCORED_PAIRS", 10)
    inner, calls = blocked.blocked_levels, []
    monkeypatch.setattr(
        blocked, "blocked_levels", lambda *a, **k: calls.append(1) or inner(*a, **k)
    )
    if compute_again:
        monkeypatch.setattr(pipeline, "_kept_units", lambda *a: None)
    out = folder / name
    preds = []
    for model, path in zip("mn", matrices, strict=True):
        preds += ["--pred", f"{model}={path}", "--format", f"{model}=dense"]
    argv = ["evaluate", "--gold", str(gold), *preds, "--out", str(out),
            "--cache", str(folder / "cache"), "--unknown-docs", "drop", "--bootstrap", "30",
            "--permutations", "49"]  # fmt: skip
    assert cli.main(argv) == 0
    monkeypatch.undo()
    found = {name: pl.read_parquet(out / f"{name}.parquet") for name in OUTPUTS}
    return {"outputs": found, "rankings": len(calls), "out": out}


def test_kept_units_give_the_same_bits_and_rank_each_matrix_once(
    tmp_path, monkeypatch, icd9_leaves
):
    gold, matrices = _dense_zoo(tmp_path, icd9_leaves)
    kept = _evaluate(monkeypatch, tmp_path, gold, matrices, "kept", compute_again=False)
    again = _evaluate(monkeypatch, tmp_path, gold, matrices, "again", compute_again=True)
    assert kept["rankings"] == len(matrices)  # the score stage's reads alone
    assert again["rankings"] == 2 * len(matrices)  # and the uncertainty stage's again
    for model in "mn":
        assert (kept["out"] / "work" / "ranking" / f"{model}.units.npz").is_file()
    auc = pl.col("metric") == "auc"
    assert kept["outputs"]["intervals"].filter(auc)["low"].null_count() == 0
    assert kept["outputs"]["intervals"].filter(auc).height > 10
    for name in OUTPUTS:
        _same_bits(kept["outputs"][name], again["outputs"][name], name)


def test_below_the_cap_no_units_are_kept(tmp_path, icd9_leaves):
    """Below the cap the long path's exact AUC plan gives the units: nothing is kept."""
    gold, matrices = _dense_zoo(tmp_path, icd9_leaves)
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={matrices[0]}", "--format",
            "m=dense", "--out", str(out), "--cache", str(tmp_path / "cache"),
            "--unknown-docs", "drop", "--bootstrap", "5"]  # fmt: skip
    assert cli.main(argv) == 0
    assert not list((out / "work" / "ranking").glob("*.npz"))


def _plan(**changes) -> dict:
    plan = {"scores": '{"path": "m.npy", "sha256": "ab"}', "doc_ids": ["d1", "d2", "d3"],
            "seed": 7, "bootstrap": 4, "ks": (1, 5), "levels": ("category",)}  # fmt: skip
    return units_plan(**(plan | changes))


def _units() -> RankingUnits:
    rng = np.random.default_rng(0)
    boot = {"leaf": {"micro": rng.random(4), "macro": rng.random(4), "bound": rng.random(4)},
            "category": {"micro": np.full(4, np.nan), "macro": rng.random(4),
                         "bound": rng.random(4)}}  # fmt: skip
    keys = (("ranking", "leaf", "micro", "auc"), ("calibration", "leaf", "micro", "brier"))
    return RankingUnits(rng.random((3, 2)), {"leaf|docs": 0, "calibration|brier": 1}, keys,
                        {}, {}, boot)  # fmt: skip


def test_units_come_back_as_written_and_only_for_their_plan(tmp_path):
    units, path = _units(), tmp_path / "m.units.npz"
    assert load_units(path, plan=_plan()) is None  # no file yet
    save_units(path, units, plan=_plan())
    back = load_units(path, plan=_plan())
    assert back.columns.tobytes() == units.columns.tobytes()
    assert back.names == units.names and back.keys == units.keys
    assert list(back.auc_bootstrap) == list(units.auc_bootstrap)  # the levels' order too
    for level, values in units.auc_bootstrap.items():
        assert list(back.auc_bootstrap[level]) == list(values)
        for name, array in values.items():
            assert back.auc_bootstrap[level][name].tobytes() == array.tobytes()
    for change in (
        {"seed": 8},
        {"bootstrap": 5},
        {"doc_ids": ["d1", "d2", "d4"]},
        {"scores": '{"path": "m.npy", "sha256": "ac"}'},
        {"ks": (1, 8)},
        {"levels": ()},
    ):
        assert load_units(path, plan=_plan(**change)) is None, change


def test_units_with_exact_auc_plans_are_not_kept(tmp_path):
    units = _units()
    with pytest.raises(ValueError, match="dense model"):
        save_units(
            tmp_path / "u.npz",
            RankingUnits(units.columns, units.names, units.keys, {"leaf": object()}),
            plan=_plan(),
        )


def _small_levels(second_read=None, threads=None):
    rng = np.random.default_rng(4)
    matrix = (np.round(rng.random((50, 12)) * 10) / 10).astype(np.float32)  # ties
    gold = np.argwhere(rng.random((50, 12)) < 0.2)
    node_of = {"group": np.arange(12) // 3}
    return blocked.blocked_levels(
        matrix, gold[:, 0], gold[:, 1], node_of=node_of, block_docs=8,
        second_read=second_read, threads=threads,
    )  # fmt: skip


def test_the_replicates_read_beside_the_counts_sees_every_block_in_order():
    """The second read's visits (a block's levels side by side on the run's threads, each
    level after its own point AUCs' counts) come for every block and level, each level's in
    block order and every block's before the next block's; the point estimates are those of
    a read without visits, bit for bit."""
    seen = []

    def second_read(states):
        return lambda name, number, start, block: seen.append((name, number, start, block.shape))

    visited, plain = _small_levels(second_read, threads=2), _small_levels()
    assert sorted(seen) == sorted(
        (name, number, 8 * number, (min(8, 50 - 8 * number), width))
        for number in range(7)
        for name, width in (("leaf", 12), ("group", 4))
    )
    for level in ("leaf", "group"):
        assert [number for name, number, *_ in seen if name == level] == list(range(7))
    numbers = [number for _, number, *_ in seen]
    assert numbers == sorted(numbers)
    for name, (aucs, ranks) in plain.items():
        other_aucs, other_ranks = visited[name]
        assert other_aucs.micro == aucs.micro
        assert other_aucs.per_label.tobytes() == aucs.per_label.tobytes()
        assert other_ranks.position.tobytes() == ranks.position.tobytes()
        assert other_ranks.precision.tobytes() == ranks.precision.tobytes()


def test_an_error_in_the_replicates_read_is_raised():
    def second_read(states):
        def visit(name, number, start, block):
            if number == 3:
                raise ValueError("visit failed")

        return visit

    with pytest.raises(ValueError, match="visit failed"):
        _small_levels(second_read)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_replicates_read_keeps_to_the_threads_given(threads):
    """``--threads 1``: the visits run on the calling thread; two: on a helper."""
    import threading

    where = set()

    def second_read(states):
        return lambda *args: where.add(threading.current_thread())

    _small_levels(second_read, threads=threads)
    assert (where == {threading.current_thread()}) == (threads == 1)


def test_both_readings_of_a_dense_model_keep_to_the_threads_given(
    tmp_path, monkeypatch, icd9_leaves
):
    """``--threads 1``: the score stage's reading and the uncertainty stage's (its units
    computed again) both read the levels on one thread (each was handed the run's threads)."""
    gold, matrices = _dense_zoo(tmp_path, icd9_leaves)
    for module in (uncertainty_ranking, blocked_rows, tables):
        monkeypatch.setattr(module, "AUC_MAX_SCORED_PAIRS", 10)
    monkeypatch.setattr(pipeline, "_kept_units", lambda *a: None)
    inner, asked = blocked.blocked_levels, []

    def levels(*args, **kwargs):
        asked.append((kwargs.get("aucs", True), kwargs.get("threads")))
        return inner(*args, **kwargs)

    monkeypatch.setattr(blocked, "blocked_levels", levels)
    preds = []
    for model, path in zip("mn", matrices, strict=True):
        preds += ["--pred", f"{model}={path}", "--format", f"{model}=dense"]
    argv = ["evaluate", "--gold", str(gold), *preds, "--out", str(tmp_path / "out"),
            "--cache", str(tmp_path / "cache"), "--unknown-docs", "drop", "--bootstrap", "10",
            "--permutations", "9", "--threads", "1"]  # fmt: skip
    assert cli.main(argv) == 0
    assert {aucs for aucs, _ in asked} == {True, False}  # both stages read
    assert {threads for _, threads in asked} == {1}
