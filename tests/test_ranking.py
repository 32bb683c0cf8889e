"""Ranking and calibration metrics against scikit-learn and naive references written here.

Each case builds a small dense gold matrix and a score matrix with ties (scores drawn from a
few values), then drops some scores ("truncated", as CAML's top-100 files are): the unscored
pairs must rank below every scored one, tied among themselves for AUC and MAP and in code order
for the @K metrics. scikit-learn sees the same rule as a score below every real one.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from hieval.metrics.ranking import (
    arrays_from_pairs,
    calibration_values,
    encode,
    level_arrays,
    point_values,
)

KS = (1, 3, 5)


def make_case(seed: int, *, truncated: bool, docs: int = 30, labels: int = 12):
    """Gold (bool matrix), scores (float matrix, NaN = unscored) with many ties."""
    rng = np.random.default_rng(seed)
    gold = rng.random((docs, labels)) < 0.25
    gold[0] = False  # a gold document without codes
    gold[:, 3] = False  # a code nobody has (left out of macro AUC)
    gold[:, 5] = True  # a code everybody has (left out of macro AUC)
    scores = rng.choice([0.1, 0.3, 0.5, 0.7, 0.9], size=(docs, labels)) + 0.3 * gold
    scores = np.round(scores, 6) / 1.3
    if truncated:
        scores[rng.random((docs, labels)) < 0.4] = np.nan
        scores[1] = np.nan  # a document the model scored nothing for
    return gold, scores


def to_arrays(gold: np.ndarray, scores: np.ndarray):
    docs, labels = gold.shape
    keys = np.arange(docs * labels).reshape(docs, labels)
    scored = ~np.isnan(scores)
    return arrays_from_pairs(docs, labels, keys[scored], scores[scored], keys[gold])


def filled(scores: np.ndarray) -> np.ndarray:
    """The rule for unscored pairs, as scikit-learn can see it: below every real score."""
    return np.where(np.isnan(scores), np.nanmin(scores) - 1.0, scores)


def naive_order(row: np.ndarray) -> list[int]:
    """A document's ranking: scored codes by score (ties by code), then unscored by code."""
    scored = [c for c in range(len(row)) if not np.isnan(row[c])]
    unscored = [c for c in range(len(row)) if np.isnan(row[c])]
    return sorted(scored, key=lambda c: (-row[c], c)) + unscored


def naive(gold: np.ndarray, scores: np.ndarray, ks) -> dict:
    docs = range(gold.shape[0])
    with_gold = [d for d in docs if gold[d].any()]
    out = {}
    for k in ks:
        out["mean", f"precision@{k}"] = np.mean(
            [sum(gold[d, c] for c in naive_order(scores[d])[:k]) / k for d in docs]
        )
        out["mean", f"recall@{k}"] = np.mean(
            [sum(gold[d, c] for c in naive_order(scores[d])[:k]) / gold[d].sum() for d in with_gold]
        )
    out["mean", "r_precision"] = np.mean(
        [
            sum(gold[d, c] for c in naive_order(scores[d])[: gold[d].sum()]) / gold[d].sum()
            for d in with_gold
        ]
    )
    return out


@pytest.mark.parametrize("truncated", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ranking_metrics_match_sklearn_and_naive(seed, truncated):
    gold, scores = make_case(seed, truncated=truncated)
    values = point_values(to_arrays(gold, scores), KS)
    full = filled(scores)
    assert values["micro", "auc"] == pytest.approx(
        roc_auc_score(gold.ravel(), full.ravel()), abs=1e-12
    )
    usable = [c for c in range(gold.shape[1]) if 0 < gold[:, c].sum() < gold.shape[0]]
    assert values["macro", "auc"] == pytest.approx(
        np.mean([roc_auc_score(gold[:, c], full[:, c]) for c in usable]), abs=1e-12
    )
    with_gold = [d for d in range(gold.shape[0]) if gold[d].any()]
    assert values["mean", "map"] == pytest.approx(
        np.mean([average_precision_score(gold[d], full[d]) for d in with_gold]), abs=1e-12
    )
    for key, expected in naive(gold, scores, KS).items():
        assert values[key] == pytest.approx(expected, abs=1e-12), key


def test_map_ties_are_one_threshold():
    """A hand-worked document: gold {a, c}; scores a .5, b .5, c .2 -> thresholds .5 (P 1/2,
    R 1/2) and .2 (P 2/3, R 1): AP = 1/2 x 1/2 + 1/2 x 2/3 = 7/12 (not 1/2 + ...)."""
    arrays = arrays_from_pairs(1, 3, [0, 1, 2], [0.5, 0.5, 0.2], [0, 2])
    values = point_values(arrays, (1,))
    assert values["mean", "map"] == pytest.approx(7 / 12)
    assert values["mean", "precision@1"] == 1.0  # a and b tie: a comes first by code


def test_unscored_gold_code_in_top_k_by_code_order():
    """One document scores only code 2 (not gold); codes 0 and 1 are gold and unscored, so the
    ranking is 2, 0, 1, 3: P@2 = 1/2, R@3 = 1."""
    arrays = arrays_from_pairs(1, 4, [2], [0.9], [0, 1])
    values = point_values(arrays, (2, 3))
    assert values["mean", "precision@2"] == 0.5
    assert values["mean", "recall@3"] == 1.0
    # AUC: positives 0, 1 tied with 3 at the bottom, below 2: (1 + 1 + 0.5 + 0.5) / 4
    assert values["micro", "auc"] == pytest.approx(0.25)


@pytest.mark.parametrize("truncated", [False, True])
def test_calibration_matches_a_direct_computation(truncated):
    gold, scores = make_case(7, truncated=truncated)
    values = calibration_values(to_arrays(gold, scores))
    p = np.nan_to_num(scores, nan=0.0).ravel()
    y = gold.ravel().astype(float)
    assert values["brier"] == pytest.approx(np.mean((p - y) ** 2), abs=1e-12)
    bins = np.minimum((p * 15).astype(int), 14)
    ece = sum(
        np.sum(bins == b) / len(p) * abs(p[bins == b].mean() - y[bins == b].mean())
        for b in range(15)
        if np.any(bins == b)
    )
    assert values["ece"] == pytest.approx(ece, abs=1e-12)


def test_no_calibration_outside_unit_interval():
    arrays = arrays_from_pairs(1, 2, [0, 1], [-2.0, 3.0], [0])
    assert calibration_values(arrays) is None


def test_encode_label_space_is_gold_codes_plus_scored_codes():
    gold = pl.DataFrame({"doc_id": ["a", "a", "b", "c"], "code": ["1", "2", "3", None]})
    scores = pl.DataFrame(
        {"doc_id": ["a", "b", "b"], "code": ["1", "4", "4"], "score": [0.2, 0.5, 0.7]}
    )
    arrays = encode(gold, scores)
    assert arrays.labels == ("1", "2", "3", "4")
    assert arrays.n_docs == 3  # c counts, with no gold code
    assert arrays.key.tolist() == [0, 4 + 3] and arrays.score.tolist() == [0.2, 0.7]
    assert arrays.unscored == 3 * 4 - 2


@pytest.mark.parametrize("truncated", [False, True])
def test_hierarchical_ranking_is_max_pooling(truncated):
    """Level metrics equal the leaf metrics of matrices max-pooled naively here."""
    gold, scores = make_case(3, truncated=truncated, labels=9)
    codes = [f"c{i}" for i in range(9)]
    parent = {f"c{i}": f"p{i // 3}" for i in range(8)}  # c8 has no node at this level
    ancestors = pl.DataFrame(
        {
            "code": list(parent),
            "level": ["up"] * len(parent),
            "ancestor": list(parent.values()),
        }
    )
    arrays = to_arrays(gold, scores)
    arrays = arrays_from_pairs(
        arrays.n_docs, arrays.n_labels, arrays.key, arrays.score, arrays.gold_key, codes
    )
    pooled, left_out = level_arrays(arrays, ancestors, "up")
    assert left_out == 1
    nodes = sorted(set(parent.values()))
    pooled_gold = np.zeros((gold.shape[0], len(nodes)), dtype=bool)
    pooled_scores = np.full((gold.shape[0], len(nodes)), np.nan)
    for c, code in enumerate(codes):
        if code not in parent:
            continue
        n = nodes.index(parent[code])
        pooled_gold[:, n] |= gold[:, c]
        pooled_scores[:, n] = np.fmax(pooled_scores[:, n], scores[:, c])
    expected = point_values(to_arrays(pooled_gold, pooled_scores), KS)
    assert point_values(pooled, KS) == pytest.approx(expected, abs=1e-12)
    # and against scikit-learn directly, so that the reference is not the code itself
    assert point_values(pooled, KS)["micro", "auc"] == pytest.approx(
        roc_auc_score(pooled_gold.ravel(), filled(pooled_scores).ravel()), abs=1e-12
    )
