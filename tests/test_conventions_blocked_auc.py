"""The conventions' AUCs (Matrices.aucs) now come from the blocked exact counts; they must be
the floats the per-label ``auc`` (argsort, doubled average ranks) gives, bit for bit: ties,
labels without a positive or without a negative, and the flattened matrix."""

from __future__ import annotations

import numpy as np
import pytest

from hieval.conventions.matrix import Matrices, auc


@pytest.mark.parametrize("seed", range(6))
def test_aucs_equal_the_per_label_argsort_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    n_docs, n_labels = 1100 if seed == 0 else 37, 23  # seed 0: more than one block
    raw = np.round(rng.random((n_docs, n_labels)), 2)  # ties
    raw[:, 3] = 0.0  # a label scored 0 everywhere (as unscored pairs are)
    y = rng.random((n_docs, n_labels)) < 0.2
    y[:, 0] = False  # no positive: left out of macro
    y[:, 1] = True  # no negative: NaN, left out
    m = Matrices([], [], y, y, raw, {})
    per_label = [auc(y[:, j], raw[:, j]) for j in np.flatnonzero(y.any(0))]
    defined = [v for v in per_label if not np.isnan(v)]
    expected_macro = float(np.mean(defined))
    expected_micro = auc(y.ravel(), raw.ravel())
    assert np.float64(m.aucs["auc_macro"]).view(np.int64) == np.float64(expected_macro).view(
        np.int64
    )
    assert np.float64(m.aucs["auc_micro"]).view(np.int64) == np.float64(expected_micro).view(
        np.int64
    )


def test_no_positive_anywhere_gives_nan():
    y = np.zeros((4, 3), dtype=bool)
    m = Matrices([], [], y, y, np.random.default_rng(1).random((4, 3)), {})
    assert np.isnan(m.aucs["auc_micro"]) and np.isnan(m.aucs["auc_macro"])
