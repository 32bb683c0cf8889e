"""The conventions' ROC-AUC (hieval.conventions.matrix.auc) sorts only the cells that are not
0 and counts the zeros in where they rank: checked against scikit-learn's roc_auc_score on
score vectors of mostly zeros with ties, negative scores (logits) and positives at 0."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from hieval.conventions.matrix import auc


@pytest.mark.parametrize("seed", range(6))
def test_auc_matches_sklearn_on_mostly_zero_scores(seed):
    rng = np.random.default_rng(seed)
    n = 2000
    scores = np.zeros(n)
    scored = rng.random(n) < 0.1
    values = rng.choice([-2.0, -0.5, 0.25, 0.5, 0.9, 3.0], size=n)  # ties, negatives
    scores[scored] = values[scored]
    truth = rng.random(n) < np.where(scored, 0.5, 0.05)  # positives among the zeros too
    assert auc(truth, scores) == pytest.approx(roc_auc_score(truth, scores), abs=1e-12)


def test_hand_worked_zeros_rank_between_negative_and_positive_scores():
    """Scores -1, 0, 0, 2 with truth 0, 1, 0, 1: positive at 0 beats -1 and ties the other 0
    (1.5 of 2 negatives), positive at 2 beats both: (1.5 + 2) / 4 = 0.875."""
    truth = np.array([False, True, False, True])
    assert auc(truth, np.array([-1.0, 0.0, 0.0, 2.0])) == 0.875
    assert np.isnan(auc(np.zeros(3, dtype=bool), np.zeros(3)))
