"""ROC-AUC bootstrap replicates above the exact plan's 4M-scored-pair cap (issue 36):
:mod:`hieval.metrics.uncertainty.auc_blocks` against a weighted Mann-Whitney written here
(every positive-negative pair of the weighted label space compared), against the exact plan
(:mod:`hieval.metrics.uncertainty.auc`: macro to the last bit), and end to end: a dense zoo
above a lowered cap gets AUC intervals and comparison intervals (and the paired bootstrap
test's p-value: tests/test_auc_pvalue_capped.py), equal between
the blocked and the long path where the method is exact."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval import cli
from hieval.inputs.dense_normalize import LONG_PATH_VARIABLE
from hieval.metrics.uncertainty.auc import auc_pairs, auc_plan, auc_replicates
from hieval.metrics.uncertainty.auc_blocks import AucAccumulator, ordered_prefix


def _weighted_mann_whitney(scores: np.ndarray, gold: np.ndarray, w: np.ndarray):
    """Micro and macro AUC of a documents x labels matrix (-inf: unscored, tied below every
    score) for each row of document weights, by comparing every pair: the definition."""
    micro, macro = [], []
    for weights in w:
        cell_w = np.repeat(weights, scores.shape[1])
        x, g = scores.ravel(), gold.ravel()
        micro.append(_auc(x[g], x[~g], cell_w[g], cell_w[~g]))
        per_label = [
            _auc(scores[gold[:, j], j], scores[~gold[:, j], j], weights[gold[:, j]],
                 weights[~gold[:, j]])
            for j in range(scores.shape[1])
        ]  # fmt: skip
        defined = [v for v in per_label if not np.isnan(v)]
        macro.append(np.mean(defined) if defined else np.nan)
    return np.array(micro), np.array(macro)


def _auc(pos, neg, wp, wn) -> float:
    if wp.sum() == 0 or wn.sum() == 0:
        return np.nan
    pairs = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    return float((wp[:, None] * wn[None, :] * pairs).sum() / (wp.sum() * wn.sum()))


def _case(seed: int, *, docs: int = 50, labels: int = 11, grid: bool = False):
    """Scores (continuous, or on a 0.1 grid: ties), a gold with a label outside the scored
    ones, unscored cells, and Poisson bootstrap weights."""
    rng = np.random.default_rng(seed)
    scores = rng.random((docs, labels)).astype(np.float32).astype(np.float64)
    if grid:
        scores = np.round(scores, 1)
    gold = rng.random((docs, labels)) < 0.2
    scores = scores + 0.3 * gold  # positives rank higher, not perfectly
    scored = rng.random((docs, labels)) < 0.85
    total = labels + 1
    full_gold = np.zeros((docs, total), dtype=bool)
    full_gold[:, :labels] = gold
    full_gold[rng.integers(0, docs, 3), labels] = True
    full_scores = np.full((docs, total), -np.inf)
    full_scores[:, :labels] = np.where(scored, scores, -np.inf)
    weights = rng.poisson(1.0, (9, docs)).astype(np.float64)
    return scores, gold, scored, full_scores, full_gold, weights


def new_accumulator(scores, gold, scored, full_gold, weights, *, bins: int):
    """An accumulator of the case's matrix, given its scored positives: it, and where they
    are (document, column)."""
    docs, labels = scores.shape
    gold_doc, gold_label = np.nonzero(full_gold)
    pos_doc, pos_col = np.nonzero(gold & scored)
    acc = AucAccumulator(
        weights=weights, n_docs=docs, total=full_gold.shape[1], full_of=np.arange(labels),
        gold_doc=gold_doc, gold_label=gold_label, pos_doc=pos_doc, pos_col=pos_col,
        pos_score=scores[pos_doc, pos_col], bins=bins,
    )  # fmt: skip
    return acc, pos_doc, pos_col


def _accumulate(scores, gold, scored, full_gold, weights, *, bins: int, chunk: int = 97):
    docs = scores.shape[0]
    acc, _, _ = new_accumulator(scores, gold, scored, full_gold, weights, bins=bins)
    neg_doc, neg_col = np.nonzero(~gold & scored)
    order = np.random.default_rng(0).permutation(len(neg_doc))  # any order, any chunks
    neg_doc, neg_col = neg_doc[order], neg_col[order]
    for first in range(0, len(neg_doc), chunk):
        part = slice(first, first + chunk)
        acc.add(neg_doc[part], neg_col[part], scores[neg_doc[part], neg_col[part]])
    out = acc.finish((scored.T.astype(np.float64) @ weights.T).T)
    assert acc.kind == (np.float32 if weights.max() * docs < 2**24 else np.float64)
    return out


@pytest.mark.parametrize(("seed", "grid", "bins"), [(1, False, 64), (2, True, 16), (3, False, 8)])
def test_macro_exact_and_micro_within_its_bound_against_the_definition(seed, grid, bins):
    scores, gold, scored, full_scores, full_gold, weights = _case(seed, grid=grid)
    out = _accumulate(scores, gold, scored, full_gold, weights, bins=bins)
    micro, macro = _weighted_mann_whitney(full_scores, full_gold, weights)
    np.testing.assert_allclose(out.macro, macro, rtol=0, atol=1e-12)
    gap = np.abs(out.micro - micro)
    assert np.all(gap <= out.bound + 1e-12), (gap, out.bound)
    assert np.all(out.bound > 0)  # a real approximation here: the bound is not vacuous 0
    assert np.all(out.bound < 0.5)


def test_the_bound_shrinks_with_more_bins_and_the_binned_value_follows():
    scores, gold, scored, full_scores, full_gold, weights = _case(4, docs=120, labels=15)
    micro, _ = _weighted_mann_whitney(full_scores, full_gold, weights)
    coarse = _accumulate(scores, gold, scored, full_gold, weights, bins=4)
    fine = _accumulate(scores, gold, scored, full_gold, weights, bins=1024)
    assert fine.bound.max() < coarse.bound.max() / 10
    assert np.all(np.abs(fine.micro - micro) <= fine.bound + 1e-12)


def test_macro_equals_the_exact_plan_to_the_last_bit():
    """The same scored pairs through the exact plan (sorted pairs, sparse intervals): macro
    replicates equal bit for bit (integer sums, the same final arithmetic), micro within the
    bound."""
    from hieval.metrics.ranking import ScoreArrays

    scores, gold, scored, _full_scores, full_gold, weights = _case(5, grid=True)
    docs = scores.shape[0]
    total = full_gold.shape[1]
    doc, label = np.nonzero(scored)
    key = doc * total + label
    gold_doc, gold_label = np.nonzero(full_gold)
    gold_key = np.sort(gold_doc * total + gold_label)
    arrays = ScoreArrays(
        n_docs=docs, n_labels=total, key=key, score=scores[doc, label], gold_key=gold_key,
        labels=tuple(f"L{j:02d}" for j in range(total)),
    )  # fmt: skip
    exact = auc_replicates(auc_plan([auc_pairs(arrays)]), [weights])
    out = _accumulate(scores, gold, scored, full_gold, weights, bins=32)
    assert np.array_equal(out.macro.view(np.int64), exact["macro"].view(np.int64))
    assert np.all(np.abs(out.micro - exact["micro"]) <= out.bound + 1e-12)


def test_the_prefix_orders_scores():
    values = np.array([-np.inf, -3.5, -1e-30, -0.0, 0.0, 1e-30, 0.25, 0.5, 0.9999, 7.0, np.inf])
    prefix = ordered_prefix(values)
    assert np.all(np.diff(prefix) >= 0)
    assert prefix[1] < prefix[4] < prefix[7] < prefix[9]


def _dense_zoo(folder, icd9_leaves, models: int = 2):
    """Two dense models (the wiring tests' case and a noisier copy) on the same gold."""
    from tests.test_dense_wiring import _matrix_case

    gold, matrix = _matrix_case(folder, icd9_leaves)
    rng = np.random.default_rng(11)
    scores = np.load(matrix)
    other = np.clip(scores + rng.normal(0, 0.2, scores.shape), 0, 1).astype(np.float32)
    np.save(folder / "n.npy", other)
    for kind in ("codes", "docs"):
        (folder / f"n.{kind}.txt").write_text((folder / f"m.{kind}.txt").read_text())
    return gold, [matrix, folder / "n.npy"][:models]


def _run(monkeypatch, folder, gold, matrices, *, long: bool, cap: int | None) -> dict:
    from hieval.metrics import blocked_rows
    from hieval.metrics.uncertainty import ranking as uncertainty_ranking
    from hieval.metrics.uncertainty import tables
    from hieval.metrics.uncertainty.auc import AUC_MAX_SCORED_PAIRS

    # None: the real cap again (a previous run of the same test lowered it)
    for module in (uncertainty_ranking, blocked_rows, tables):
        monkeypatch.setattr(
            module, "AUC_MAX_SCORED_PAIRS", AUC_MAX_SCORED_PAIRS if cap is None else cap
        )
    if long:
        monkeypatch.setenv(LONG_PATH_VARIABLE, "1")
    else:
        monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
    out = folder / f"{'long' if long else 'blocked'}-{cap}"
    preds = []
    for name, path in zip("mn", matrices, strict=False):
        preds += ["--pred", f"{name}={path}", "--format", f"{name}=dense"]
    argv = ["evaluate", "--gold", str(gold), *preds, "--out", str(out),
            "--cache", str(folder / "cache"), "--unknown-docs", "drop", "--bootstrap", "40",
            "--permutations", "49"]  # fmt: skip
    assert cli.main(argv) == 0
    return {
        name: pl.read_parquet(out / f"{name}.parquet")
        for name in ("metrics", "intervals", "comparisons")
    }


@pytest.fixture
def zoo_runs(tmp_path, monkeypatch, icd9_leaves):
    gold, matrices = _dense_zoo(tmp_path, icd9_leaves)
    return {
        (long, cap): _run(monkeypatch, tmp_path, gold, matrices, long=long, cap=cap)
        for long, cap in ((False, 10), (True, 10), (True, None))
    }


def test_a_dense_zoo_above_the_cap_gets_auc_intervals_and_comparison_intervals(zoo_runs):
    above = zoo_runs[False, 10]
    auc = pl.col("metric") == "auc"
    intervals = above["intervals"].filter(auc)
    metrics = above["metrics"].filter(auc)
    assert intervals.height == metrics.height > 10  # every AUC row, every level, both models
    assert intervals["low"].null_count() == 0
    # the intervals surround sensible values: inside [0, 1], near their estimates
    joined = intervals.join(metrics, on=["model", "family", "level", "average", "metric"])
    assert (joined["low"] <= joined["high"]).all()
    assert ((joined["low"] >= 0) & (joined["high"] <= 1)).all()
    assert ((joined["value_right"] - joined["low"]).abs() < 0.2).all()
    assert ((joined["high"] - joined["value_right"]).abs() < 0.2).all()
    comparisons = above["comparisons"].filter(auc)
    assert comparisons.height == metrics.height // 2  # one pair of models
    assert comparisons["low"].null_count() == 0
    # the paired bootstrap test, not the randomization test (tests/test_auc_pvalue_capped.py)
    assert comparisons["p_value"].null_count() == 0
    assert (comparisons["test"] == "bootstrap").all()
    assert comparisons["permutations"].null_count() == comparisons.height
    others = above["comparisons"].filter(~auc)
    assert others["p_value"].null_count() == 0


def test_below_the_cap_nothing_changes_and_above_it_macro_is_the_exact_plans(zoo_runs):
    """Below the cap the long path's exact plan (today's numbers); above the lowered cap the
    blocked and the long path agree to the last bit on macro AUC (exact), and on micro within
    the binned bound (their bins are placed on different first chunks), and with the exact
    plan's intervals to within the bootstrap's own spread."""
    blocked, long, exact = zoo_runs[False, 10], zoo_runs[True, 10], zoo_runs[True, None]
    auc = pl.col("metric") == "auc"
    keys = ["model", "family", "level", "average", "metric"]
    macro = auc & (pl.col("average") == "macro")
    a = blocked["intervals"].filter(macro).sort(keys)
    b = long["intervals"].filter(macro).sort(keys)
    c = exact["intervals"].filter(macro).sort(keys)
    for column in ("low", "high"):
        assert np.array_equal(a[column].to_numpy(), b[column].to_numpy())
        assert np.array_equal(a[column].to_numpy(), c[column].to_numpy())
    micro = auc & (pl.col("average") == "micro")
    a = blocked["intervals"].filter(micro).sort(keys)
    c = exact["intervals"].filter(micro).sort(keys)
    assert a.height == c.height > 0
    for column in ("low", "high"):
        assert np.abs(a[column].to_numpy() - c[column].to_numpy()).max() < 0.05
    # every other interval is the same on both paths, cap or not
    rest = ~auc
    assert (
        blocked["intervals"]
        .filter(rest)
        .sort(keys)
        .equals(exact["intervals"].filter(rest).sort(keys))
    )


def test_the_long_path_above_the_cap_replicates_auc_with_repeated_documents(monkeypatch):
    """A long score table above the (lowered) cap: its AUC rows are replicated from the
    chunked accumulator, looked up by replicate index; with integer weights a replicate is
    the test set with each document repeated, so scikit-learn on the repeated rows is the
    reference (macro within float rounding, micro within the replicate's bound)."""
    from sklearn.metrics import roc_auc_score
    from test_ranking import make_case
    from test_uncertainty_auc import BELOW, LABELS, frames

    from hieval.metrics.uncertainty.ranking import ranking_replicates, ranking_units

    gold, scores = make_case(21, truncated=True, labels=LABELS)
    monkeypatch.setattr("hieval.metrics.uncertainty.ranking.AUC_MAX_SCORED_PAIRS", 5)
    weights = np.random.default_rng(2).poisson(1.0, (6, gold.shape[0])).astype(np.float64)
    gold_frame, score_frame = frames(gold, scores)
    doc_ids = gold_frame["doc_id"].unique().sort()
    model = ranking_units(gold_frame, score_frame, doc_ids=doc_ids, ks=(1,), weights=weights)
    assert ("ranking", "leaf", "micro", "auc") in model.keys
    assert "leaf" in model.auc_bootstrap and "leaf" not in model.auc
    keys = [("ranking", "leaf", "micro", "auc"), ("ranking", "leaf", "macro", "auc")]
    later = ranking_replicates([(model, weights[2:5])], keys, first=2)
    bound = model.auc_bootstrap["leaf"]["bound"]
    full = np.where(np.isnan(scores), BELOW, scores)
    for r, w in enumerate(weights[2:5], start=2):
        repeat = np.repeat(np.arange(gold.shape[0]), w.astype(int))
        g, x = gold[repeat], full[repeat]
        micro = roc_auc_score(g.ravel(), x.ravel())
        per_code = [roc_auc_score(g[:, c], x[:, c]) for c in range(LABELS)
                    if 0 < g[:, c].sum() < len(g)]  # fmt: skip
        assert abs(later[keys[0]][r - 2] - micro) <= bound[r] + 1e-12
        assert later[keys[1]][r - 2] == pytest.approx(np.mean(per_code), abs=1e-12)
    with pytest.raises(ValueError, match="above the cap"):
        ranking_replicates([(model, weights), (model, weights)], keys, first=0)


def test_weights_too_large_for_float32_sums_take_float64():
    """A weight of 2**24 would make float32 interval sums inexact: the fold then sums in
    float64, and macro still matches the definition."""
    scores, gold, scored, full_scores, full_gold, weights = _case(6)
    weights[0, 3] = 2.0**24
    out = _accumulate(scores, gold, scored, full_gold, weights, bins=64)
    _, macro = _weighted_mann_whitney(full_scores, full_gold, weights)
    np.testing.assert_allclose(out.macro, macro, rtol=1e-12, atol=1e-12)
