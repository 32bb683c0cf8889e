"""Issue 35 through Snakemake: the uncertainty job writes the headline replicates, the history
keeps them with the seed, and a model whose predictions changed is compared with its last
evaluation by the paired bootstrap interval of the difference (the summary says "paired"),
which is narrower than the approximation from the two evaluations' own intervals."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from helpers import small_demo_config, snakemake

from hieval.reports import changes, history


def test_a_changed_model_gets_the_paired_interval_of_its_change(tmp_path):
    small_demo_config(tmp_path, models=("cautious_coder", "sibling_confuser"))
    result = snakemake(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    kept = pl.read_parquet(tmp_path / "results/report/replicates.parquet")
    assert set(kept["model"]) == {"cautious_coder", "sibling_confuser"}
    assert set(kept["replicates"].list.len()) == {200}
    # the kept replicates are each row's own: their percentiles are the row's interval
    intervals = pl.read_parquet(tmp_path / "results/report/intervals.parquet")
    for row in kept.iter_rows(named=True):
        key = ("model", "family", "level", "average", "metric")
        [own] = intervals.filter(pl.all_horizontal(pl.col(k) == row[k] for k in key)).to_dicts()
        low, high = np.nanquantile(np.array(row["replicates"]), [0.025, 0.975])
        assert (low, high) == pytest.approx((own["low"], own["high"]), abs=1e-12), row["metric"]
    first = history.read_history(tmp_path / "results/history/evaluations.parquet")
    assert first["replicates"].null_count() == 0 and first["bootstrap_seed"].n_unique() == 1

    # a retrained cautious_coder: a tenth of its rows dropped
    predictions = tmp_path / "results/demo/predictions/cautious_coder.parquet"
    frame = pl.read_parquet(predictions)
    frame.sample(fraction=0.9, seed=1).write_parquet(predictions)
    result = snakemake(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]

    whole = history.read_history(tmp_path / "results/history/evaluations.parquet")
    current = whole.filter(pl.col("model") == "cautious_coder").tail(len(history.HISTORY_METRICS))
    found = changes.last_changes(whole, current)
    assert found.height == len(history.HISTORY_METRICS)
    assert set(found["method"]) == {changes.PAIRED}
    before, now = (
        whole.filter((pl.col("model") == "cautious_coder") & (pl.col("metric") == "F-set"))
        .select("low", "high")
        .rows()
    )
    approximate = math.hypot((before[1] - before[0]) / 2, (now[1] - now[0]) / 2)
    [f_set] = found.filter(pl.col("metric") == "F-set").to_dicts()
    assert f_set["half_width"] < approximate
    summary = (tmp_path / "results/report/summary.md").read_text()
    assert "## Changes since the last evaluation" in summary
    assert "| cautious\\_coder | F-set |" in summary and "| paired |" in summary
