"""PSP@K and PSnDCG@K (issue 33) against a reference written here from Jain et al. (2016)'s
formulas as pyxclib evaluates them (dense numpy, one document at a time): inverse
propensities 1 + C·(N_l + B)^(−A), C = (ln N − 1)·(B + 1)^A from the training labels; the
mean over documents of the propensity-weighted precision (nDCG) at K divided by the mean of
the same for the best ranking (the gold codes by propensity weight). Also: a hand-worked
document, the rows' absence without a training gold (and the note saying why), and the
bootstrap's weighted replicates against the reference on documents repeated."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from test_ranking import make_case, naive_order, to_arrays
from test_uncertainty_ranking import KS, LEVEL, frames

from hieval.engine.icm import IcmParams
from hieval.metrics.propensity import TrainPropensities
from hieval.metrics.ranking import point_values, score_rows
from hieval.metrics.uncertainty.ranking import ranking_replicates, ranking_units

A, B = 0.55, 1.5


def reference_inverse_propensity(train: np.ndarray, a: float = A, b: float = B) -> np.ndarray:
    """Jain et al.'s 1/p_l over the columns of a training label matrix (documents x labels)."""
    n = train.shape[0]
    c = (np.log(n) - 1) * (b + 1) ** a
    return 1 + c * (train.sum(axis=0) + b) ** -a


def reference_ps(gold: np.ndarray, scores: np.ndarray, weight: np.ndarray, k: int) -> tuple:
    """PSP@K and PSnDCG@K as pyxclib's ``psprecision`` and ``psndcg`` compute them: per
    document its top K (the model's ranking; here ties by code and unscored codes last, as
    every hieval @K metric) and its best top K (gold codes by weight); each metric the mean
    over every document of the model's value / the mean of the best value."""
    discount = 1 / np.log2(np.arange(k) + 2)
    precision, best_precision, dcg, best_dcg = [], [], [], []
    for d in range(gold.shape[0]):
        weighted = gold[d] * weight
        top = naive_order(scores[d])[:k]
        best = sorted(range(gold.shape[1]), key=lambda c: -weighted[c])[:k]
        gains, best_gains = weighted[top], weighted[best]
        precision.append(gains.sum() / k)
        best_precision.append(best_gains.sum() / k)
        n_gold = int(gold[d].sum())
        ideal = np.sum(1 / np.log2(np.arange(min(n_gold, k)) + 2)) if n_gold else 1.0
        dcg.append(np.sum(gains * discount[: len(top)]) / ideal)
        best_dcg.append(np.sum(best_gains * discount[: len(best)]) / ideal)
    return (
        np.mean(precision) / np.mean(best_precision),
        np.mean(dcg) / np.mean(best_dcg),
    )


def train_matrix(seed: int, labels: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 100)
    train = rng.random((80, labels)) < rng.random(labels) * 0.5
    train[:, 2] = False  # a code the training set never holds: the highest weight
    return train


@pytest.mark.parametrize("truncated", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_psp_and_psndcg_match_the_reference(seed, truncated):
    gold, scores = make_case(seed, truncated=truncated)
    weight = reference_inverse_propensity(train_matrix(seed, gold.shape[1]))
    arrays = replace(to_arrays(gold, scores), gain=weight)
    got = point_values(arrays, KS)
    for k in KS:
        psp, psndcg = reference_ps(gold, scores, weight, k)
        assert got["mean", f"psp@{k}"] == pytest.approx(psp, rel=1e-12), k
        assert got["mean", f"psndcg@{k}"] == pytest.approx(psndcg, rel=1e-12), k
        # Propensities change the number: not P@K or nDCG@K renamed.
        assert got["mean", f"psp@{k}"] != pytest.approx(got["mean", f"precision@{k}"])
    assert got["mean", "psp@5"] < 1


def test_train_propensities_match_the_formula():
    """From a normalised training gold: N counts a document without codes, N_l the
    documents holding code l (a duplicated row once), 0 for a code the training set lacks."""
    train = train_matrix(0, 6)
    codes = [f"c{c}" for c in range(6)]
    rows = [(f"t{d}", codes[c]) for d, c in zip(*np.nonzero(train), strict=True)]
    rows += [(f"t{d}", None) for d in range(train.shape[0]) if not train[d].any()]
    rows.append(rows[0])  # a duplicated row counts once
    frame = pl.DataFrame(rows, schema=["doc_id", "code"], orient="row")
    propensities = TrainPropensities.from_gold(frame, IcmParams())
    assert propensities.n_docs == train.shape[0]
    expected = reference_inverse_propensity(train)
    np.testing.assert_allclose(propensities.of(codes), expected, rtol=1e-13)
    unseen = propensities.of(["zz"])[0]
    assert unseen == pytest.approx(expected[2])  # as a code held by no training document
    other = TrainPropensities.from_gold(frame, IcmParams(propensity_a=0.6, propensity_b=2.6))
    assert other.of(codes)[0] != pytest.approx(expected[0])  # A and B are the settings'


def test_psp_hand_worked():
    """One document, gold {a, b} with weights a 1, b 3, c 2; the model ranks c, a, b.
    PSP@1: model 0 (c is not gold) / best 3 = 0. PSP@2: (0 + 1) / (3 + 1) = 1/4.
    PSnDCG@2: ideal DCG@2 = 1 + 1/log2(3); model 1/log2(3), best 3 + 1/log2(3):
    (1/log2 3) / (3 + 1/log2 3) (the ideal cancels in a one-document ratio)."""
    gold = np.array([[True, True, False]])
    scores = np.array([[0.5, 0.1, 0.9]])
    arrays = replace(to_arrays(gold, scores), gain=np.array([1.0, 3.0, 2.0]))
    got = point_values(arrays, (1, 2))
    assert got["mean", "psp@1"] == 0.0
    assert got["mean", "psp@2"] == 1 / 4
    third = 1 / math.log2(3)
    assert got["mean", "psndcg@2"] == pytest.approx(third / (3 + third), rel=1e-15)


def _train_frame(gold: pl.DataFrame) -> pl.DataFrame:
    """A training gold over the test codes, skewed so that the weights differ."""
    codes = sorted(gold["code"].drop_nulls().unique().to_list())
    rows = [(f"t{i}", codes[j]) for i in range(40) for j in range(len(codes)) if (i + j) % (j + 2)]
    return pl.DataFrame(rows, schema=["doc_id", "code"], orient="row")


def test_rows_absent_without_a_training_gold_and_the_notes_say_why():
    gold, scores, ancestors = frames(1, False)
    options = {"model": "m", "ks": KS, "ancestors": ancestors, "levels": (LEVEL,)}
    plain, notes = score_rows(gold, scores, **options)
    assert not plain.filter(pl.col("metric").str.starts_with("ps")).height
    assert "--train-gold" in notes["propensity"]
    propensities = TrainPropensities.from_gold(_train_frame(gold), IcmParams())
    tidy, notes = score_rows(gold, scores, propensities=propensities, **options)
    ps = tidy.filter(pl.col("metric").str.starts_with("ps"))
    assert sorted(ps["metric"].to_list()) == sorted(
        [f"psp@{k}" for k in KS] + [f"psndcg@{k}" for k in KS]
    )
    assert set(ps["level"]) == {"leaf"}  # leaves only: a pooled level has no propensities
    assert "propensity" not in notes
    assert (
        tidy.join(plain, on=["family", "level", "average", "metric"])
        .filter(pl.col("value") != pl.col("value_right"))
        .is_empty()
    )  # the other rows are unchanged


@pytest.mark.parametrize("truncated", [False, True])
def test_weighted_replicates_are_the_reference_on_repeated_documents(truncated):
    """A bootstrap replicate with integer weights is the test set with each document that
    many times: the reference on the repeated rows gives its PSP@K and PSnDCG@K."""
    gold_frame, scores_frame, ancestors = frames(2, truncated)
    propensities = TrainPropensities.from_gold(_train_frame(gold_frame), IcmParams())
    doc_ids = gold_frame["doc_id"].unique().sort()
    units = ranking_units(
        gold_frame, scores_frame, doc_ids=doc_ids, ks=KS, ancestors=ancestors,
        levels=(LEVEL,), propensities=propensities,
    )  # fmt: skip
    keys = [key for key in units.keys if key[3].startswith("ps")]
    assert len(keys) == 2 * len(KS)
    weights = np.random.default_rng(5).integers(0, 3, size=(4, doc_ids.len()))
    replicated = ranking_replicates([(units, weights.astype(np.float64))], keys)
    gold, scores = make_case(2, truncated=truncated, labels=9)
    codes = [f"c{c}" for c in range(gold.shape[1])]
    weight = propensities.of(codes)
    for r, row in enumerate(weights):
        repeated = np.repeat(np.arange(gold.shape[0]), row)
        for k in KS:
            psp, psndcg = reference_ps(gold[repeated], scores[repeated], weight, k)
            assert replicated["ranking", "leaf", "mean", f"psp@{k}"][r] == pytest.approx(psp)
            assert replicated["ranking", "leaf", "mean", f"psndcg@{k}"][r] == pytest.approx(psndcg)
