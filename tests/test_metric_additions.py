"""The two metrics added as one declaration each (issue 32), against independent oracles:
F2 (every count family) against scikit-learn's ``fbeta_score`` and a naive formula, nDCG@K
against a naive ranking written here, scikit-learn's ``ndcg_score`` (where no score ties) and a
hand-worked document; and that the outputs pick them up with no other edit."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import fbeta_score, ndcg_score, precision_recall_fscore_support
from sklearn.preprocessing import MultiLabelBinarizer
from test_metrics_sklearn import LEVELS, random_labels, to_frame
from test_ranking import KS, make_case, to_arrays

from hieval.engine.driver import count
from hieval.metrics import registry
from hieval.metrics.prf import metrics_table
from hieval.metrics.ranking import arrays_from_pairs, point_values

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("seed", [1, 2])
def test_f2_matches_sklearn_fbeta(seed, icd9_leaves, icd9_ancestors):
    """Flat F2 micro and macro are scikit-learn's fbeta_score(beta=2); macro_hm is F-beta of
    scikit-learn's macro P and R, 5PR / (4P + R)."""
    rng = np.random.default_rng(seed)
    pool = [str(c) for c in rng.choice(sorted(icd9_leaves), 64, replace=False)]
    gold = random_labels(rng, pool[:50], 150, 1, 7)
    gold["d000"] = sorted({*gold["d000"], pool[60]})  # a code never predicted
    pred = {
        doc: sorted(
            {c for c in codes if rng.random() < 0.6}
            | {str(c) for c in rng.choice(pool[10:60], int(rng.integers(0, 4)))}
        )
        for doc, codes in gold.items()
    }
    nodes, _ = count(to_frame(gold), to_frame(pred), icd9_ancestors, LEVELS)
    tidy = metrics_table(nodes, "m").filter(pl.col("family") == "flat")
    got = {(r["average"], r["metric"]): r["value"] for r in tidy.iter_rows(named=True)}
    docs = sorted(gold)
    labels = sorted({c for d in docs for c in gold[d]} | {c for d in docs for c in pred[d]})
    mlb = MultiLabelBinarizer(classes=labels)
    y_true, y_pred = (
        mlb.fit_transform([gold[d] for d in docs]),
        mlb.transform([pred[d] for d in docs]),
    )
    for average in ("micro", "macro"):
        expected = fbeta_score(y_true, y_pred, beta=2, average=average, zero_division=0)
        assert got[average, "f2"] == pytest.approx(expected, abs=1e-12), average
    p, r, _, _ = precision_recall_fscore_support(y_true, y_pred, average="macro", zero_division=0)
    assert got["macro_hm", "f2"] == pytest.approx(5 * p * r / (4 * p + r), abs=1e-12)
    assert got["micro", "f2"] != got["micro", "f1"]  # F2 weighs recall: not F1 renamed


def test_f2_hand_worked():
    """One node, TP 1, FP 3, FN 0: P 1/4, R 1; F1 = 2/5; F2 = 5·1 / (5·1 + 3 + 0) = 5/8."""
    nodes = pl.DataFrame(
        {"family": ["flat"], "level": ["leaf"], "node": ["a"], "tp": [1], "fp": [3], "fn": [0]}
    )
    got = {
        (r["average"], r["metric"]): r["value"]
        for r in metrics_table(nodes, "m").iter_rows(named=True)
    }
    assert got["micro", "f1"] == 2 / 5
    assert got["micro", "f2"] == 5 / 8
    assert got["macro", "f2"] == 5 / 8
    assert got["macro_hm", "f2"] == pytest.approx(5 * 0.25 * 1 / (4 * 0.25 + 1))


def naive_ndcg(gold: np.ndarray, scores: np.ndarray, k: int) -> float:
    """Mean over documents with a gold code of DCG@K / IDCG@K: each document's codes sorted by
    score descending, ties by code index, unscored (NaN) codes after every scored one in code
    order; binary gains; discount 1 / log2(rank + 1), rank 1-based."""
    values = []
    for d in range(gold.shape[0]):
        if not gold[d].any():
            continue
        scored = [c for c in range(gold.shape[1]) if not np.isnan(scores[d, c])]
        unscored = [c for c in range(gold.shape[1]) if np.isnan(scores[d, c])]
        order = sorted(scored, key=lambda c: (-scores[d, c], c)) + unscored
        dcg = sum(1 / math.log2(i + 2) for i, c in enumerate(order[:k]) if gold[d, c])
        ideal = sum(1 / math.log2(i + 2) for i in range(min(k, int(gold[d].sum()))))
        values.append(dcg / ideal)
    return float(np.mean(values))


@pytest.mark.parametrize("truncated", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ndcg_matches_a_naive_ranking(seed, truncated):
    """Many tied scores, unscored codes, a document without gold codes: the tie convention of
    P@K (ties by code) is nDCG@K's."""
    gold, scores = make_case(seed, truncated=truncated)
    values = point_values(to_arrays(gold, scores), KS)
    for k in KS:
        assert values["mean", f"ndcg@{k}"] == pytest.approx(naive_ndcg(gold, scores, k), abs=1e-12)


@pytest.mark.parametrize("seed", [3, 4])
def test_ndcg_matches_sklearn_without_ties(seed):
    """Without tied scores, scikit-learn's ndcg_score (per document, averaged over documents
    with a gold code) is the same metric."""
    rng = np.random.default_rng(seed)
    gold = rng.random((25, 12)) < 0.3
    gold[0] = False
    scores = rng.permutation(25 * 12).reshape(25, 12) / (25 * 12) + 0.001
    values = point_values(to_arrays(gold, scores), KS)
    rows = [d for d in range(25) if gold[d].any()]
    for k in KS:
        expected = np.mean([ndcg_score(gold[d : d + 1], scores[d : d + 1], k=k) for d in rows])
        assert values["mean", f"ndcg@{k}"] == pytest.approx(expected, abs=1e-12)


def test_ndcg_hand_worked_and_tie_convention():
    """Gold {a, c}; scores a .9, b .8, c .7: nDCG@2 = 1 / (1 + 1/log2 3) = 0.6131.
    Tied scores a .5, b .5 with gold {b}: hieval ranks a first (ties by code, as for P@K), so
    nDCG@1 = 0 and P@1 = 0; scikit-learn averages over the tie (0.5)."""
    values = point_values(arrays_from_pairs(1, 3, [0, 1, 2], [0.9, 0.8, 0.7], [0, 2]), (2,))
    assert values["mean", "ndcg@2"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert values["mean", "ndcg@2"] == pytest.approx(0.6131471927654584)
    tied = point_values(arrays_from_pairs(1, 2, [0, 1], [0.5, 0.5], [1]), (1,))
    assert tied["mean", "ndcg@1"] == 0.0
    assert tied["mean", "precision@1"] == 0.0
    assert ndcg_score([[0, 1]], [[0.5, 0.5]], k=1) == pytest.approx(0.5)


def test_the_declarations_reach_every_derived_list():
    """F2 and nDCG@K were added as one declaration each: the registry's derived lists (the
    tidy order, summary.csv's columns, the docs' table) hold them."""
    assert "f2" in registry.PRF_METRICS
    assert registry.lookup("flat", "macro_hm", "f2").formula.startswith("5TP")
    ndcg = registry.lookup("ranking", "mean", "ndcg@15")
    assert ndcg in registry.DOCUMENT_MEANS and ndcg.paper == "nDCG@K"
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    table = hooks.metric_table()
    assert "ndcg@{k}" in table and "| f2 |" in table.replace("`", "")
