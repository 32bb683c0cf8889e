"""Decisions from a dense matrix by blocks (hieval.metrics.blocked, issue 36): the same pairs
and record counts as today's normalisation of the same ``.npy`` (threshold, per-code tuned
thresholds, top-k with ties by code), hand-worked cases, and the tuned global threshold of
today's exact sweep (hieval.metrics.tuning)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval.inputs.normalize import normalize_labels
from hieval.inputs.options import LabelOptions, TunedThresholds
from hieval.metrics.blocked import blocked_global_threshold, decided_pairs
from hieval.metrics.ranking import arrays_from_pairs
from hieval.metrics.tuning import global_threshold

DOCS = [f"{100 + 7 * i}" for i in range(23)]


@pytest.fixture
def dense(tmp_path, icd9, icd9_leaves):
    """23 documents x 19 ICD-9 codes listed out of code order, scores on a 0.1 grid (ties),
    and a gold naming every document."""
    rng = np.random.default_rng(11)
    codes = [icd9_leaves[i] for i in rng.choice(len(icd9_leaves), 19, replace=False)]
    scores = np.round(rng.random((len(DOCS), len(codes))), 1)
    path = tmp_path / "s.npy"
    np.save(path, scores)
    (tmp_path / "s.codes.txt").write_text("\n".join(codes) + "\n")
    (tmp_path / "s.docs.txt").write_text("\n".join(DOCS) + "\n")
    gold_csv = tmp_path / "gold.csv"
    gold_csv.write_text("doc_id,code\n" + "".join(f"{d},{codes[0]}\n" for d in DOCS))
    gold = tmp_path / "gold.parquet"
    normalize_labels(gold_csv, name="gold", role="gold", out=gold, hierarchy=icd9)
    return path, scores, codes, gold


def _todays(tmp_path, icd9, dense, options, tuned=None):
    path, _scores, _codes, gold = dense
    out = tmp_path / "p.parquet"
    record = normalize_labels(
        path,
        name="m",
        role="predictions",
        out=out,
        hierarchy=icd9,
        gold_docs=gold,
        options=options,
        tuned=tuned,
    )
    pairs = pl.read_parquet(out).drop_nulls("code").select("doc_id", "code").rows()
    return set(pairs), record


def _ours(dense, block_docs, **selection):
    _path, scores, codes, _gold = dense
    code_order = np.argsort(np.argsort(codes))
    decided = decided_pairs(scores, code_order=code_order, block_docs=block_docs, **selection)
    pairs = {(DOCS[r], codes[c]) for r, c in zip(decided.rows, decided.cols, strict=True)}
    return pairs, decided


@pytest.mark.parametrize("block_docs", [1, 4, 100])
@pytest.mark.parametrize(
    ("threshold", "top_k"), [(0.5, None), (None, 3), (0.3, 4), (0.95, 2), (None, 19)]
)
def test_same_decisions_as_todays_normalisation(tmp_path, icd9, dense, threshold, top_k,
                                                block_docs):  # fmt: skip
    today, record = _todays(tmp_path, icd9, dense, LabelOptions(threshold=threshold, top_k=top_k))
    ours, decided = _ours(dense, block_docs, threshold=threshold, top_k=top_k)
    assert ours == today
    assert decided.below_threshold == (record.below_threshold or 0)
    assert decided.outside_top_k == (record.outside_top_k or 0)
    assert len(today) > 0


def test_per_code_tuned_thresholds_as_today(tmp_path, icd9, dense):
    _path, _scores, codes, _gold = dense
    own = {codes[2]: 0.2, codes[5]: 0.9, codes[11]: 0.0}
    tuned = TunedThresholds(threshold=0.6, per_code=own, source={"method": "test"})
    today, record = _todays(tmp_path, icd9, dense, LabelOptions(), tuned=tuned)
    per_column = np.array([own.get(c, np.nan) for c in codes])
    ours, decided = _ours(dense, 5, threshold=0.6, code_thresholds=per_column)
    assert ours == today
    assert decided.below_threshold == record.below_threshold


def test_top_k_ties_are_broken_by_code_hand_worked():
    """One row: columns hold codes B, A, C (code order 1, 0, 2) scored 0.5, 0.5, 0.9. Top 2:
    C (0.9), then of the tied B and A the first in code order, A (column 1)."""
    scores = np.array([[0.5, 0.5, 0.9]])
    decided = decided_pairs(scores, top_k=2, code_order=np.array([1, 0, 2]))
    assert decided.cols.tolist() == [1, 2]
    assert decided.outside_top_k == 1
    by_column = decided_pairs(scores, top_k=2)
    assert by_column.cols.tolist() == [0, 2]


def test_threshold_keeps_scores_at_it():
    decided = decided_pairs(np.array([[0.5, 0.49, 0.51]]), threshold=0.5)
    assert decided.cols.tolist() == [0, 2]
    assert decided.below_threshold == 1


def _todays_threshold(scores, gold, extra_gold=0):
    """tuning.global_threshold on the same pairs; ``extra_gold`` gold pairs in a column the
    model did not score."""
    docs, labels = scores.shape
    width = labels + (1 if extra_gold else 0)
    key = (np.arange(docs)[:, None] * width + np.arange(labels)[None, :]).ravel()
    gold_key = [r * width + c for r, c in zip(*np.nonzero(gold), strict=True)]
    gold_key += [r * width + labels for r in range(extra_gold)]
    arrays = arrays_from_pairs(docs, width, key, scores.ravel(), np.array(gold_key))
    threshold, f1, _curve = global_threshold(arrays)
    return threshold, f1


@pytest.mark.parametrize("block_docs", [1, 6, 1000])
@pytest.mark.parametrize(("seed", "decimals", "extra"), [(0, 1, 0), (1, 2, 0), (2, 3, 4)])
def test_global_threshold_as_todays_sweep(seed, decimals, extra, block_docs):
    rng = np.random.default_rng(seed)
    gold = rng.random((37, 23)) < 0.15
    scores = np.round(np.clip(rng.random((37, 23)) * 0.8 + 0.3 * gold, 0, 1), decimals)
    rows, cols = np.nonzero(gold)
    ours = blocked_global_threshold(
        scores, rows, cols, unscored_positives=extra, block_docs=block_docs
    )
    assert ours == _todays_threshold(scores, gold, extra)


def test_global_threshold_without_a_scored_gold_pair():
    scores = np.array([[0.2, 0.7], [0.4, 0.1]])
    ours = blocked_global_threshold(
        scores, np.array([], dtype=int), np.array([], dtype=int), unscored_positives=2
    )
    assert ours == _todays_threshold(scores, np.zeros((2, 2), dtype=bool), 2) == (0.7, 0.0)


def test_global_threshold_ties_go_to_the_highest_hand_worked():
    """Gold 0.9 and 0.5. At 0.9: TP 1, FP 0, FN 1: F1 2/3. At 0.5: TP 2, FP 2 (0.6, 0.7),
    FN 0: F1 4/6 = 2/3 too. The higher threshold, 0.9, is chosen."""
    scores = np.array([[0.9, 0.6, 0.1], [0.5, 0.7, 0.2]])
    gold = np.array([[True, False, False], [True, False, False]])
    rows, cols = np.nonzero(gold)
    assert blocked_global_threshold(scores, rows, cols) == _todays_threshold(scores, gold)
    assert blocked_global_threshold(scores, rows, cols) == (0.9, pytest.approx(2 / 3))
