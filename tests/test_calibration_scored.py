"""Calibration over the scored pairs only (``brier`` / ``ece`` ``scored``), against
scikit-learn's ``brier_score_loss`` and a naive binned ECE written here on the scored pairs of
a dense matrix, and a hand-worked case.

The label-space rows count a truncated file's unscored pairs as score 0; these rows leave them
out, so a model that scored few pairs is not made to look calibrated by its unscored zeros.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import brier_score_loss
from test_ranking import make_case, to_arrays

from hieval.metrics.ranking import arrays_from_pairs, calibration_values, score_rows


def naive_ece(p: np.ndarray, y: np.ndarray, bins: int = 15) -> float:
    """Σ over equal-width bins (the last closed) of share of pairs x |mean gold - mean score|."""
    total = 0.0
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        inside = (p >= low) & ((p < high) if b < bins - 1 else (p <= high))
        if inside.any():
            total += inside.sum() / len(p) * abs(y[inside].mean() - p[inside].mean())
    return total


@pytest.mark.parametrize("seed", [3, 7, 11])
@pytest.mark.parametrize("truncated", [False, True])
def test_scored_calibration_matches_sklearn_and_naive(seed, truncated):
    gold, scores = make_case(seed, truncated=truncated)
    scored = ~np.isnan(scores)
    p, y = scores[scored], gold[scored].astype(int)
    values = calibration_values(to_arrays(gold, scores), average="scored")
    assert values["brier"] == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    assert values["ece"] == pytest.approx(naive_ece(p, y.astype(float)), abs=1e-12)
    if truncated:  # the label-space rows differ: unscored pairs count there
        micro = calibration_values(to_arrays(gold, scores))
        assert micro["brier"] != pytest.approx(values["brier"], abs=1e-6)


def test_hand_worked_scored_calibration():
    """One document, four codes; scored: code 0 at 0.9 (gold), code 1 at 0.2 (not gold); code 2
    gold and unscored, code 3 unscored. Over the scored pairs: Brier = (0.1² + 0.2²) / 2 =
    0.025; ECE: bin 13 holds 0.9 (gap 0.1), bin 3 holds 0.2 (gap 0.2): (0.1 + 0.2) / 2 = 0.15.
    Over the label space: Brier = (0.01 + 0.04 + 1 + 0) / 4 = 0.2625."""
    arrays = arrays_from_pairs(1, 4, [0, 1], [0.9, 0.2], [0, 2])
    scored = calibration_values(arrays, average="scored")
    assert scored["brier"] == pytest.approx(0.025, abs=1e-15)
    assert scored["ece"] == pytest.approx(0.15, abs=1e-15)
    assert calibration_values(arrays)["brier"] == pytest.approx(0.2625, abs=1e-15)


def test_score_rows_add_scored_rows_beside_the_label_space_rows():
    gold = pl.DataFrame({"doc_id": ["a", "a", "b"], "code": ["1", "2", "3"]})
    scores = pl.DataFrame({"doc_id": ["a", "b"], "code": ["1", "2"], "score": [0.8, 0.4]})
    rows, _ = score_rows(gold, scores, model="m")
    calibration = rows.filter(pl.col("family") == "calibration")
    got = {(r["average"], r["metric"]): r["value"] for r in calibration.iter_rows(named=True)}
    assert set(got) == {(a, m) for a in ("micro", "scored") for m in ("brier", "ece")}
    # scored pairs: (a, 1) 0.8 gold, (b, 2) 0.4 not gold: (0.04 + 0.16) / 2
    assert got["scored", "brier"] == pytest.approx(0.1, abs=1e-15)
