"""Threshold tuning against a hand-worked example and a brute-force sweep written here."""

from __future__ import annotations

import numpy as np
import pytest

from hieval.metrics.ranking import arrays_from_pairs
from hieval.metrics.tuning import global_threshold, per_code_thresholds, tune


def test_hand_worked_global_threshold():
    """Labels a, b, c; gold d0 {a}, d1 {b, c}; scores d0: a .9, b .4; d1: a .2, b .6, c .4.
    t .9: TP 1 FP 0 FN 2 -> 1/2; t .6: 2 0 1 -> 4/5; t .4: 3 1 0 -> 6/7; t .2: 3 2 0 -> 3/4."""
    arrays = arrays_from_pairs(2, 3, [0, 1, 3, 4, 5], [0.9, 0.4, 0.2, 0.6, 0.4], [0, 4, 5])
    threshold, f1, curve = global_threshold(arrays)
    assert threshold == 0.4 and f1 == pytest.approx(6 / 7)
    assert curve["threshold"].to_list() == [0.2, 0.4, 0.6, 0.9]
    assert curve["f1"].to_list() == pytest.approx([3 / 4, 6 / 7, 4 / 5, 1 / 2])
    assert curve["chosen"].to_list() == [False, True, False, False]


def test_ties_go_to_the_highest_threshold():
    """Gold {a, b}; a .9, c .8, d .75, b .7: t .9 gives 2/3 (1 TP, 1 FN) and t .7 gives
    4/6 = 2/3 too (2 TP, 2 FP): the higher one wins."""
    arrays = arrays_from_pairs(1, 4, [0, 1, 2, 3], [0.9, 0.7, 0.8, 0.75], [0, 1])
    threshold, f1, _ = global_threshold(arrays)
    assert threshold == 0.9 and f1 == pytest.approx(2 / 3)


def brute_f1(gold: set, scored: dict, threshold: float, codes=None) -> float:
    predicted = {p for p, s in scored.items() if s >= threshold}
    if codes is not None:
        gold = {g for g in gold if g[1] in codes}
        predicted = {p for p in predicted if p[1] in codes}
    tp = len(predicted & gold)
    den = len(predicted) + len(gold)
    return 2 * tp / den if den else 0.0


@pytest.mark.parametrize("seed", range(4))
def test_brute_force_sweep(seed):
    rng = np.random.default_rng(seed)
    docs, labels = 25, 8
    gold = rng.random((docs, labels)) < 0.3
    scores = np.round(rng.random((docs, labels)) * 0.6 + 0.4 * gold, 1)  # ties
    scored_mask = rng.random((docs, labels)) < 0.8  # some gold pairs never scored
    keys = np.arange(docs * labels).reshape(docs, labels)
    arrays = arrays_from_pairs(
        docs,
        labels,
        keys[scored_mask],
        scores[scored_mask],
        keys[gold],
        [f"c{i}" for i in range(labels)],
    )
    gold_set = {(d, c) for d, c in zip(*np.nonzero(gold), strict=True)}
    scored = {(d, c): scores[d, c] for d, c in zip(*np.nonzero(scored_mask), strict=True)}
    candidates = sorted(set(scored.values()))
    f1s = {t: brute_f1(gold_set, scored, t) for t in candidates}
    best = max(f1s.values())
    threshold, f1, _ = global_threshold(arrays)
    assert f1 == pytest.approx(best)
    assert threshold == max(t for t, v in f1s.items() if v == best)

    per_code = per_code_thresholds(arrays, min_support=3)
    support = gold.sum(axis=0)
    assert sorted(per_code["code"]) == sorted(
        f"c{c}" for c in range(labels) if support[c] >= 3 and any(scored_mask[:, c])
    )
    for code, t, n, f in per_code.iter_rows():
        c = int(code[1:])
        own = sorted({s for (d, cc), s in scored.items() if cc == c})
        values = {u: brute_f1(gold_set, scored, u, codes={c}) for u in own}
        top = max(values.values())
        assert n == support[c]
        assert f == pytest.approx(top)
        assert t == max(u for u, v in values.items() if v == top)


def test_per_code_off_gives_no_code_thresholds():
    arrays = arrays_from_pairs(1, 2, [0, 1], [0.9, 0.1], [0], ["a", "b"])
    assert tune(arrays).per_code.height == 0
    assert tune(arrays, per_code=True, min_support=1).per_code["code"].to_list() == ["a"]
