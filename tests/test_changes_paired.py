"""Issue 35: "Changes since the last evaluation" says whether a move is larger than the
bootstrap interval of the difference, from the paired bootstrap when both evaluations kept
their headline replicates (same seed, same count, same gold), else from the approximation
sqrt(h_before² + h_now²), and says which.

Checked against a hand-worked case and against a naive paired bootstrap written here: each
replicate reweights the same documents for both evaluations and takes the difference of their
micro-F1; its percentile interval must be what the history-based report finds from the two
evaluations' replicates, each computed on its own (as two runs days apart would).
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from test_history_series import F_SET, ICM, TIDY_COLUMNS, _records, _tidy

from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights
from hieval.reports import changes, history

KEY_COLUMNS = TIDY_COLUMNS[:5]


def _intervals(low: float, high: float) -> pl.DataFrame:
    return pl.DataFrame(
        [("m", *F_SET, low, high)],
        schema=dict.fromkeys(KEY_COLUMNS, pl.String) | {"low": pl.Float64, "high": pl.Float64},
        orient="row",
    )


def _replicates(draws, seed: int) -> pl.DataFrame:
    return pl.DataFrame(
        [("m", *F_SET, seed, list(draws))], schema=history.REPLICATE_SCHEMA, orient="row"
    )


def _evaluation(value, interval, draws, *, seed=1, inputs="i", when="t", confidence=0.5):
    bootstrap = (_intervals(*interval), confidence)
    if draws is not None:
        bootstrap = (*bootstrap, _replicates(draws, seed))
    return history.history_rows(
        _tidy({("m", F_SET): value, ("m", ICM): 1.0}),
        records=_records(inputs=inputs * 64),
        settings={"run": {}, "models": {}},
        version="1.0",
        code_system="icd9",
        hierarchy_sha256="h" * 64,
        bootstrap=bootstrap,
        timestamp=when,
    )


def _f_set_change(path, before, now) -> dict:
    history.append_history(path, before)
    whole = history.append_history(path, now)
    [row] = changes.last_changes(whole, now).filter(pl.col("metric") == "F-set").to_dicts()
    return row


def test_paired_interval_hand_worked(tmp_path):
    """Before 0.50 (replicates .50 .50 .50 .50 .50), now 0.53 (.51 .52 .53 .54 .55): the
    differences are .01 … .05; at confidence 0.5 numpy's linear percentiles 25 and 75 are the
    2nd and 4th: [0.02, 0.04], half-width 0.01, beyond (0 is outside). The own intervals are
    wide ([0.40, 0.60] and [0.43, 0.63]: approximation ± 0.1414), so the approximation would
    say "not beyond": the pairing is what finds the move."""
    before = _evaluation(0.50, (0.40, 0.60), [0.5] * 5, when="t1")
    now = _evaluation(0.53, (0.43, 0.63), [0.51, 0.52, 0.53, 0.54, 0.55], inputs="n", when="t2")
    row = _f_set_change(tmp_path / "h.parquet", before, now)
    assert row["method"] == changes.PAIRED
    assert (row["low"], row["high"]) == pytest.approx((0.02, 0.04), abs=1e-12)
    assert row["half_width"] == pytest.approx(0.01, abs=1e-12)
    assert row["beyond"] is True
    assert row["change"] == pytest.approx(0.03)
    markdown = changes.changes_markdown(changes.last_changes(history.read_history(
        tmp_path / "h.parquet"), now))  # fmt: skip
    assert "| yes | paired |" in markdown


@pytest.mark.parametrize(
    ("before_seed", "before_draws"),
    [(2, [0.5] * 5), (1, [0.5] * 4), (1, None)],
    ids=["another seed", "another count", "no replicates kept"],
)
def test_falls_back_to_the_approximation_and_says_so(tmp_path, before_seed, before_draws):
    before = _evaluation(0.50, (0.40, 0.60), before_draws, seed=before_seed, when="t1")
    now = _evaluation(0.53, (0.43, 0.63), [0.51, 0.52, 0.53, 0.54, 0.55], inputs="n", when="t2")
    row = _f_set_change(tmp_path / "h.parquet", before, now)
    half = math.hypot(0.1, 0.1)
    assert row["method"] == changes.APPROXIMATE
    assert row["half_width"] == pytest.approx(half)
    assert (row["low"], row["high"]) == pytest.approx((0.03 - half, 0.03 + half))
    assert row["beyond"] is False


def _micro_f1(counts: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per row of ``weights``: micro-F1 of the weighted per-document (tp, fp, fn)."""
    tp, fp, fn = (weights @ counts).T
    return 2 * tp / (2 * tp + fp + fn)


def test_matches_a_naive_paired_bootstrap(tmp_path):
    rng = np.random.default_rng(5)
    docs = [f"d{i}" for i in range(60)]
    old = rng.integers(0, 6, size=(60, 3)).astype(float)  # tp, fp, fn per document
    new = old + rng.integers(-1, 2, size=(60, 3)).clip(min=-old)  # a retrained model
    seed, count, confidence = 7, 300, 0.9
    keys = doc_keys(docs)

    # each evaluation on its own, as two runs would: its replicates and percentile interval
    def run(counts, inputs, when):
        w = poisson_weights(keys, seed=seed, first=0, count=count)
        draws = _micro_f1(counts, w)
        low, high = np.quantile(draws, [0.05, 0.95])
        value = float(_micro_f1(counts, np.ones((1, 60)))[0])
        bootstrap = (_intervals(low, high), confidence, _replicates(draws, seed))
        return history.history_rows(
            _tidy({("m", F_SET): value}), records=_records(inputs=inputs * 64),
            settings={"run": {}, "models": {}}, version="1.0", code_system="icd9",
            hierarchy_sha256="h" * 64, bootstrap=bootstrap, timestamp=when,
        )  # fmt: skip

    row = _f_set_change(tmp_path / "h.parquet", run(old, "o", "t1"), run(new, "n", "t2"))

    # the naive paired bootstrap: replicate by replicate, each document drawn w times for both
    differences = []
    for r in range(count):
        w = poisson_weights(keys, seed=seed, first=r, count=1)[0]
        sampled = np.repeat(np.arange(60), w.astype(int))
        f_new = 2 * new[sampled, 0].sum() / (2 * new[sampled, 0].sum() + new[sampled, 1:].sum())
        f_old = 2 * old[sampled, 0].sum() / (2 * old[sampled, 0].sum() + old[sampled, 1:].sum())
        differences.append(f_new - f_old)
    low, high = np.quantile(differences, [0.05, 0.95])
    assert row["method"] == changes.PAIRED
    assert row["low"] == pytest.approx(low, abs=1e-12)
    assert row["high"] == pytest.approx(high, abs=1e-12)
    assert row["beyond"] is (not low <= 0 <= high)
    # the paired interval is narrower than the approximation from the two own intervals
    intervals = [history.read_history(tmp_path / "h.parquet")[i] for i in (0, 1)]
    approx = math.hypot(*((i["high"][0] - i["low"][0]) / 2 for i in intervals))
    assert row["half_width"] < approx


def test_history_keeps_the_replicates_and_reads_the_schema_before_them(tmp_path):
    """The replicates round-trip through the Parquet file; a history of the second schema
    (intervals, no replicates) is read with them empty and compared approximately."""
    path = tmp_path / "h.parquet"
    old = _evaluation(0.5, (0.4, 0.6), None, when="t1").select(list(history.SCHEMA_V2))
    old.write_parquet(path)
    assert history.read_history(path)["replicates"].null_count() == old.height
    now = _evaluation(0.53, (0.43, 0.63), [0.51, 0.52, 0.53, 0.54, 0.55], inputs="n", when="t2")
    whole = history.append_history(path, now)
    kept = whole.filter(pl.col("metric") == "F-set")["replicates"].to_list()
    assert kept[1] == [0.51, 0.52, 0.53, 0.54, 0.55]
    [row] = changes.last_changes(whole, now).filter(pl.col("metric") == "F-set").to_dicts()
    assert row["method"] == changes.APPROXIMATE
