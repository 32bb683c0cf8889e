"""Flat micro and macro P/R/F1 against scikit-learn.

hieval's flat macro averages over codes with gold support or a prediction, which is exactly the
union of gold and predicted codes used as scikit-learn's label set here, so both must agree.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import precision_recall_fscore_support
from sklearn.preprocessing import MultiLabelBinarizer

from hieval.engine.driver import count
from hieval.metrics.prf import metrics_table

LEVELS = ("e2", "e1", "e0", "c", "chapter")


def to_frame(labels: dict[str, list[str]]) -> pl.DataFrame:
    rows = [(doc, code) for doc, codes in labels.items() for code in codes]
    return pl.DataFrame(rows, schema={"doc_id": pl.String, "code": pl.String}, orient="row")


def random_labels(rng, pool, n_docs, low, high):
    return {
        f"d{i:03d}": sorted({str(c) for c in rng.choice(pool, int(rng.integers(low, high)))})
        for i in range(n_docs)
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_flat_matches_sklearn(seed, icd9_leaves, icd9_ancestors):
    rng = np.random.default_rng(seed)
    pool = [str(c) for c in rng.choice(sorted(icd9_leaves), 64, replace=False)]
    gold = random_labels(rng, pool[:50], 200, 1, 7)
    # Codes that are never predicted (recall 0 at the node) ...
    gold["d000"] = sorted({*gold["d000"], pool[60], pool[61]})
    gold["d001"] = sorted({*gold["d001"], pool[62]})
    # ... and codes pool[50:60] that are only predicted (precision 0 at the node).
    # Predictions: part of the gold plus random codes; some documents predict nothing.
    pred = {}
    for doc, codes in gold.items():
        kept = [c for c in codes if rng.random() < 0.6 and c not in pool[60:]]
        extra = [str(c) for c in rng.choice(pool[10:60], int(rng.integers(0, 4)))]
        pred[doc] = sorted(set(kept + extra))

    nodes, _ = count(to_frame(gold), to_frame(pred), icd9_ancestors, LEVELS)
    tidy = metrics_table(nodes, "m").filter(pl.col("family") == "flat")
    got = {(r["average"], r["metric"]): r["value"] for r in tidy.iter_rows(named=True)}

    docs = sorted(gold)
    labels = sorted({c for d in docs for c in gold[d]} | {c for d in docs for c in pred[d]})
    mlb = MultiLabelBinarizer(classes=labels)
    y_true = mlb.fit_transform([gold[d] for d in docs])
    y_pred = mlb.transform([pred[d] for d in docs])
    # Some codes only predicted, some only in the gold: the zero-division cases are exercised.
    assert ((y_true.sum(0) == 0) & (y_pred.sum(0) > 0)).any()
    assert ((y_pred.sum(0) == 0) & (y_true.sum(0) > 0)).any()

    for average in ("micro", "macro"):
        p, r, f, _ = precision_recall_fscore_support(
            y_true, y_pred, average=average, zero_division=0
        )
        assert got[(average, "precision")] == pytest.approx(p, abs=1e-12)
        assert got[(average, "recall")] == pytest.approx(r, abs=1e-12)
        assert got[(average, "f1")] == pytest.approx(f, abs=1e-12)

    tp = int((y_true & y_pred).sum())
    assert got[("micro", "tp")] == tp
    assert got[("micro", "fp")] == int(y_pred.sum()) - tp
    assert got[("micro", "fn")] == int(y_true.sum()) - tp
    # macro_hm: harmonic mean of macro P and macro R
    p, r, _, _ = precision_recall_fscore_support(y_true, y_pred, average="macro", zero_division=0)
    assert got[("macro_hm", "f1")] == pytest.approx(2 * p * r / (p + r), abs=1e-12)
    assert nodes.filter(pl.col("family") == "flat").height == len(labels)
