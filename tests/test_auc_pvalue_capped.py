"""The paired bootstrap test of ROC-AUC comparisons above the exact plan's cap (issue 36,
:mod:`hieval.metrics.uncertainty.bootstrap_test`): its p-value against the z-test written
here (``statistics.stdev``, ``math.erfc``) on replicates recomputed with scikit-learn on the
documents repeated by their Poisson weights; its binning bound against exact replicates (an
independent weighted Mann-Whitney); and end to end, every AUC comparison row above a lowered
cap gets a p-value, the test's name and Holm's adjustment, while every other row is the
run without the cap's, bit for bit."""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from test_auc_uncapped import _accumulate, _case, _weighted_mann_whitney, zoo_runs  # noqa: F401
from test_ranking import make_case
from test_uncertainty_auc import (
    ANCESTORS,
    AUC_KEYS,
    KS,
    LABELS,
    LEVEL,
    expected,
    frames,
    two_models,
)

from hieval.metrics.ranking import score_rows
from hieval.metrics.uncertainty import tables
from hieval.metrics.uncertainty.bootstrap_test import BOOTSTRAP, bootstrap_p
from hieval.metrics.uncertainty.ranking import UNDEFINED, ranking_replicates, ranking_units
from hieval.metrics.uncertainty.settings import Settings
from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights

SEED, REPLICATES = 17, 60


def _z_test(deltas: list[float], observed: float) -> float:
    """The pROC bootstrap test written out: 2 Φ(−|Δ| / sd(Δ*)), Φ by erfc."""
    if observed == 0:
        return 1.0
    se = statistics.stdev(deltas)
    return math.erfc(abs(observed) / (se * math.sqrt(2.0)))


def test_the_p_value_is_the_z_test_of_the_bootstrap_standard_error():
    rng = np.random.default_rng(1)
    deltas = rng.normal(0.01, 0.004, (200, 4))
    deltas[rng.random(deltas.shape) < 0.1] = np.nan  # undefined replicates are left out
    observed = np.array([0.01, -0.003, 0.0, 0.02])
    out = bootstrap_p(deltas, observed)
    for j in range(4):
        column = [float(x) for x in deltas[:, j] if not np.isnan(x)]
        assert out.p[j] == pytest.approx(_z_test(column, float(observed[j])), rel=1e-12)
    assert out.p[2] == 1.0  # no difference at all
    assert np.array_equal(out.p, out.lowest)  # exact replicates: no range


def test_identical_models_give_one_and_separated_models_a_vanishing_p():
    same = bootstrap_p(np.zeros((50, 2)), np.zeros(2))
    assert same.p.tolist() == [1.0, 1.0]
    rng = np.random.default_rng(2)
    apart = bootstrap_p(0.1 + rng.normal(0, 0.005, (50, 1)), np.array([0.1]))
    assert 0 < apart.p[0] < 1e-50  # no floor at 2 / (B + 1), unlike a count of replicates
    beyond = bootstrap_p(0.1 + rng.normal(0, 1e-4, (50, 1)), np.array([0.1])).p[0]
    assert beyond == np.finfo(np.float64).tiny  # the tail underflows: never p = 0
    assert np.isnan(bootstrap_p(np.full((50, 1), np.nan), np.array([0.1])).p[0])


@pytest.mark.parametrize("seed", range(6))
def test_the_conservative_end_is_never_below_the_exact_replicates_p(seed):
    """Replicates moved by at most their bound (as the binned micro AUC's are): the reported p
    is at least the exact replicates' p, and ``lowest`` at most."""
    rng = np.random.default_rng(seed)
    exact = rng.normal(0.004, 0.003, (100, 5))
    bound = rng.uniform(0, 0.002, exact.shape)
    binned = exact + bound * rng.uniform(-1, 1, exact.shape)
    observed = np.array([0.004, 0.008, -0.002, 0.0, 0.01])
    truth = bootstrap_p(exact, observed).p
    out = bootstrap_p(binned, observed, error=bound)
    assert np.all(out.p >= truth - 1e-15) and np.all(out.lowest <= truth + 1e-15)
    assert np.any(out.p > out.lowest)  # a real range


def test_binned_micro_replicates_bracket_the_exact_ones_p():
    """Two models' micro AUC replicates from the accumulator with coarse bins (a real
    approximation, bound > 0) and the same from the definition (every pair compared): the
    p of the exact differences lies in [lowest, p] of the binned ones."""
    scores, gold, scored, full_scores, full_gold, weights = _case(7, docs=80, labels=13)
    weights = np.random.default_rng(3).poisson(1.0, (40, 80)).astype(np.float64)
    rng = np.random.default_rng(4)
    other = scores + rng.normal(0, 0.15, scores.shape)
    full_other = full_scores.copy()
    full_other[:, : scores.shape[1]] = np.where(scored, other, -np.inf)
    a = _accumulate(scores, gold, scored, full_gold, weights, bins=8)
    b = _accumulate(other, gold, scored, full_gold, weights, bins=8)
    exact_a, _ = _weighted_mann_whitney(full_scores, full_gold, weights)
    exact_b, _ = _weighted_mann_whitney(full_other, full_gold, weights)
    ones = np.ones((1, 80))
    point = _weighted_mann_whitney(full_scores, full_gold, ones)[0][0]
    point -= _weighted_mann_whitney(full_other, full_gold, ones)[0][0]
    assert a.bound.min() > 0 and np.abs(a.micro - exact_a).max() > 0
    truth = bootstrap_p((exact_a - exact_b)[:, None], np.array([point])).p[0]
    out = bootstrap_p((a.micro - b.micro)[:, None], np.array([point]),
                      error=(a.bound + b.bound)[:, None])  # fmt: skip
    assert out.lowest[0] <= truth <= out.p[0]
    assert 0 < truth < 1


def _pair_above_the_cap(
    monkeypatch, scores_a, scores_b, gold, *, permutations: int = 99, below: tuple = ()
):
    """Two models' AUC comparison rows through the tables' pair code, their AUC above a
    lowered cap (the chunked replicates, as a dense model's; the models in ``below`` under
    the real cap: the exact plan's), with the zoo the tables build: tidy rows from the point
    estimates, replicates looked up by index."""
    from hieval.metrics.uncertainty.auc import AUC_MAX_SCORED_PAIRS

    gold_frame = frames(gold, scores_a)[0]
    doc_ids = gold_frame["doc_id"].unique().sort()
    weights_key = doc_keys(doc_ids.to_list())
    weights = poisson_weights(weights_key, seed=SEED, first=0, count=REPLICATES)
    tidy, ranking, replicates = {}, {}, {}
    for name, scores in (("a", scores_a), ("b", scores_b)):
        cap = AUC_MAX_SCORED_PAIRS if name in below else 5
        monkeypatch.setattr("hieval.metrics.uncertainty.ranking.AUC_MAX_SCORED_PAIRS", cap)
        _, score_frame = frames(gold, scores)
        ranking[name] = ranking_units(
            gold_frame, score_frame, doc_ids=doc_ids, ks=KS, ancestors=ANCESTORS,
            levels=(LEVEL,), weights=weights,
        )  # fmt: skip
        above = set() if name in below else {"leaf", LEVEL}
        assert set(ranking[name].auc_bootstrap) == above
        rows, _ = score_rows(gold_frame, score_frame, model=name, ks=KS, ancestors=ANCESTORS,
                             levels=(LEVEL,))  # fmt: skip
        tidy[name] = rows.filter(pl.col("metric") == "auc")
        keys = tables._keys_of(tidy[name])
        values = ranking_replicates([(ranking[name], weights)], keys, empty=UNDEFINED, first=0)
        replicates[name] = np.column_stack([values[k] for k in keys])
    zoo = tables._Zoo(
        tidy=tidy, units={"a": None, "b": None}, replicates=replicates, ranking=ranking,
        layout=SimpleNamespace(label_set="observed"), weights_key=weights_key,
        settings=Settings(bootstrap=REPLICATES, seed=SEED, permutations=permutations),
    )  # fmt: skip
    return tables._pair_rows("a", "b", zoo), weights, ranking


@pytest.mark.parametrize("below", [(), ("b",)])
def test_capped_auc_comparisons_get_sklearns_paired_bootstrap_p(monkeypatch, below):
    """Against scikit-learn on the repeated documents of each replicate: macro (exact
    replicates) equal to the z-test's p; micro (binned: bound > 0 where a bin holds a
    positive and a negative, here real ties, so the binned replicates are exact) the z-test
    with the sd widened by the bounds' ε, so above the exact replicates' p. With one model
    below the cap (a top-k file beside a dense matrix) the pair is tested the same way, its
    exact replicates adding no bound."""
    gold, scores_a, scores_b = two_models()
    scores_a = np.round(scores_a, 1)  # positives tie negatives: micro's bound is not 0
    rows, weights, ranking = _pair_above_the_cap(monkeypatch, scores_a, scores_b, gold, below=below)
    assert rows.height == len(AUC_KEYS)
    assert (rows["test"] == BOOTSTRAP).all() and rows["permutations"].null_count() == rows.height
    observed_a, observed_b = expected(gold, scores_a), expected(gold, scores_b)
    deltas = {key: [] for key in AUC_KEYS}
    for w in weights:
        copies = w.astype(int)
        star_a = expected(np.repeat(gold, copies, 0), np.repeat(scores_a, copies, 0))
        star_b = expected(np.repeat(gold, copies, 0), np.repeat(scores_b, copies, 0))
        for key in AUC_KEYS:
            if not (np.isnan(star_a[key]) or np.isnan(star_b[key])):
                deltas[key].append(star_a[key] - star_b[key])
    checked = 0
    for row in rows.iter_rows(named=True):
        key = (row["family"], row["level"], row["average"], row["metric"])
        observed = observed_a[key] - observed_b[key]
        assert row["difference"] == pytest.approx(observed, abs=1e-12)
        hand = _z_test(deltas[key], observed)
        assert 1e-6 < hand < 0.9  # a p that says something
        if row["average"] == "macro":
            assert row["p_value"] == pytest.approx(hand, rel=1e-9), key
        else:  # the sd widened by ε = √(Σ e_b² / (n − 1)), e_b both models' bounds
            boots = [ranking[m].auc_bootstrap for m in "ab" if m not in below]
            bound = sum(boot[row["level"]]["bound"] for boot in boots)
            bound = bound[~np.isnan(bound)]
            assert len(bound) == len(deltas[key]) and bound.max() > 0
            epsilon = math.sqrt(float(np.sum(bound**2)) / (len(bound) - 1))
            widened = math.erfc(
                abs(observed) / ((statistics.stdev(deltas[key]) + epsilon) * math.sqrt(2.0))
            )
            assert row["p_value"] == pytest.approx(widened, rel=1e-9), key
            assert row["p_value"] > hand, key
        checked += 1
    assert checked == len(AUC_KEYS)


def test_identical_models_above_the_cap_give_p_one_and_no_test_without_permutations(
    monkeypatch,
):
    gold, scores, _ = two_models()
    rows, *_ = _pair_above_the_cap(monkeypatch, scores, scores, gold)
    assert rows["p_value"].to_list() == [1.0] * len(AUC_KEYS)
    rows, *_ = _pair_above_the_cap(monkeypatch, scores, scores, gold, permutations=0)
    assert rows["p_value"].null_count() == rows.height and rows["test"].null_count() == rows.height
    assert (rows["permutations"] == 0).all()  # as before: "no test (permutations: 0)"


def test_the_log_names_the_test_and_the_binnings_reach(monkeypatch, caplog):
    gold, scores_a, scores_b = two_models()
    with caplog.at_level("INFO", logger="hieval.metrics.uncertainty.tables"):
        _pair_above_the_cap(monkeypatch, np.round(scores_a, 1), scores_b, gold)
    assert "a vs b: ROC-AUC at level(s) leaf, up above" in caplog.text
    assert "paired bootstrap z-test (60 replicates)" in caplog.text
    assert "move p by at most" in caplog.text and "no p-value" not in caplog.text


def test_a_clearly_better_model_above_the_cap_gets_a_small_p(monkeypatch):
    gold, noisy = make_case(24, truncated=False, docs=60, labels=LABELS)
    rng = np.random.default_rng(3)
    sharp = np.where(
        np.isnan(noisy), np.nan, np.round(0.5 * gold + 0.5 * rng.random(gold.shape), 3)
    )
    rows, *_ = _pair_above_the_cap(monkeypatch, sharp, noisy, gold)
    assert rows["p_value"].max() < 0.01, rows


def test_every_auc_comparison_above_the_cap_is_tested_and_the_rest_unchanged(zoo_runs):  # noqa: F811
    """The dense zoo above a lowered cap (blocked path): every AUC row has a bootstrap p and a
    Holm adjustment in its metric's family; the other rows equal the uncapped run's to the
    last bit, and below the cap AUC keeps the randomization test."""
    above, exact = zoo_runs[False, 10], zoo_runs[True, None]
    auc = pl.col("metric") == "auc"
    capped = above["comparisons"].filter(auc)
    assert capped.height == 10 and capped["p_value"].null_count() == 0  # 5 levels x 2
    assert (capped["test"] == "bootstrap").all()
    assert (capped["p_adjusted"] >= capped["p_value"]).all()
    keys = ["model_a", "model_b", "family", "level", "average", "metric"]
    rest = above["comparisons"].filter(~auc).sort(keys)
    assert rest.equals(exact["comparisons"].filter(~auc).sort(keys))
    assert (rest["test"] == "randomization").all() and (rest["permutations"] == 49).all()
    below = exact["comparisons"].filter(auc)
    assert (below["test"] == "randomization").all() and below["p_value"].null_count() == 0


def test_the_reports_name_the_bootstrap_test_above_the_cap(zoo_runs, tmp_path):  # noqa: F811
    """The HTML report's comparisons note names the bootstrap test where a leaderboard AUC
    row got it (and only there); summary.md still counts the randomization test's
    permutations (a bootstrap-tested row has none)."""
    capped = (tmp_path / "blocked-10" / "report.html").read_text()
    uncapped = (tmp_path / "long-None" / "report.html").read_text()
    assert "paired bootstrap z-test" in capped
    assert "paired bootstrap z-test" not in uncapped
    for run in ("blocked-10", "long-None"):
        summary = (tmp_path / run / "summary.md").read_text()
        assert "49 permutations" in summary and "None permutations" not in summary
