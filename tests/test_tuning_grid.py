"""``tuning.method: grid``: Edin et al.'s ``f1_score_db_tuning`` (src/utils/decision_boundary.py
of JoakimEdin/medical-coding-reproducibility), reimplemented here from their code on a dense
matrix (torch is no test dependency); the exact sweep stays the default."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from conventions_fixtures import dense, zoo

import hieval
from hieval.metrics.ranking import encode
from hieval.metrics.tuning import tune


def edin_db_tuning(logits: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """Their loop: for each of 100 thresholds, decisions logits > db, micro-F1 with the
    1e-10 guard; the first best (torch's argmax)."""
    dbs = np.linspace(0, 1, 100)
    f1s = []
    for db in dbs:
        pred = (logits > db).astype(float)
        tp = (pred * targets).sum()
        fp = (pred * (1 - targets)).sum()
        fn = ((1 - pred) * targets).sum()
        f1s.append(tp / (tp + 0.5 * (fp + fn) + 1e-10))
    best = int(np.argmax(f1s))
    return float(dbs[best]), float(f1s[best])


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("ties", [False, True, "on the grid"])
def test_grid_threshold_is_edin_db_tuning(seed, ties):
    gold, _, scores = zoo(seed, ties=bool(ties), documents=50, empty_docs=0)
    if ties == "on the grid":  # every score is one of the thresholds: strict > matters
        grid = np.linspace(0, 1, 100)
        snapped = grid[np.round(scores["score"].to_numpy() * 99).astype(int)]
        scores = scores.with_columns(score=pl.Series(snapped))
    labels = sorted({*gold["code"].drop_nulls(), *scores["code"]})
    _, y, _, raw = dense(gold, scores.head(0), scores, labels)
    db, f1 = edin_db_tuning(raw, y)
    result = tune(encode(gold.drop_nulls(), scores), method="grid")
    assert result.f1 == pytest.approx(f1, abs=1e-12)
    # hieval predicts score >= threshold: the next float above db predicts exactly score > db
    assert result.threshold == np.nextafter(db, 2.0)
    assert result.curve["chosen"].sum() == 1
    assert result.curve.filter("chosen")["threshold"].item() == db
    assert tune(encode(gold.drop_nulls(), scores)).threshold != result.threshold or ties


def test_grid_tuning_through_the_api(tmp_path):
    gold, _, scores = zoo(7, documents=40, empty_docs=0)
    dev_gold, _, dev_scores = zoo(8, documents=40, empty_docs=0)
    dev_gold = dev_gold.with_columns(doc_id="dev" + pl.col("doc_id"))
    dev_scores = dev_scores.with_columns(doc_id="dev" + pl.col("doc_id"))
    ev = hieval.evaluate(
        gold.drop_nulls(),
        {"m": scores},
        threshold="tune",
        dev_gold=dev_gold.drop_nulls(),
        dev_predictions={"m": dev_scores},
        tuning_method="grid",
        cache=tmp_path / "cache",
    )
    tuned = ev.records["m"]["tuned_threshold"]
    assert tuned["tuning"]["method"] == "grid"
    labels = sorted({*dev_gold["code"].drop_nulls(), *dev_scores["code"]})
    _, y, _, raw = dense(dev_gold.drop_nulls(), dev_scores.head(0), dev_scores, labels)
    db, _ = edin_db_tuning(raw, y)
    assert tuned["threshold"] == np.nextafter(db, 2.0)
    assert json.dumps(tuned)  # the record stays JSON
