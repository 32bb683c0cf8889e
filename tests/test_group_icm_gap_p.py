"""The permutation p-value of the ICM gap between groups (issue 34, subgroups): checked against a
naive permutation test written here, which draws the group labels as the module documents
(numpy's default_rng(seed).permutation of the labels 0..k-1 repeated by group size, named
groups in sorted order, documents in sorted order, ``(missing)`` left out), splits the
documents, evaluates each part alone with ``hieval.evaluate`` (its own information content)
and takes the largest ICM gap. Plus two cases whose answer is known: groups that clearly
differ (the smallest p possible) and groups that are copies of each other (p = 1)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from test_error_analysis import designed_zoo, frame_of, naive_ancestors

import hieval

ICM = {"family": "icm", "level": "overall", "average": "mean", "metric": "icm"}
PERMUTATIONS = 19
SEED = 7


def _icm_alone(gold, pred, docs, cache) -> float:
    """ICM of these documents evaluated by themselves."""
    metrics = hieval.evaluate(
        frame_of({d: gold[d] for d in docs}),
        {"m": frame_of({d: pred.get(d, set()) for d in docs})},
        cache=cache,
    ).metrics
    return metrics.filter(**ICM)["value"].item()


def _evaluate(gold, pred, groups, cache, permutations=PERMUTATIONS):
    return hieval.evaluate(
        frame_of(gold),
        {"m": frame_of(pred)},
        doc_groups=groups,
        cache=cache,
        bootstrap=10,
        permutations=permutations,
        seed=SEED,
    )


@pytest.fixture(scope="module")
def small_zoo(icd9, icd9_ancestors, tmp_path_factory):
    up = naive_ancestors(icd9_ancestors)
    gold, models, _ = designed_zoo(icd9, up, seed=5, documents=22)
    rng = np.random.default_rng(1)
    docs = sorted(gold)
    listed = docs[:-3]  # three documents in (missing): left out of the gap and its test
    ward = [str(rng.choice(["a", "b", "c"])) for _ in listed]
    groups = pl.DataFrame({"doc_id": listed, "ward": ward})
    return gold, models["near"], groups, tmp_path_factory.mktemp("cache")


def test_icm_gap_p_value_is_the_naive_permutation_tests(small_zoo):
    gold, pred, groups, cache = small_zoo
    row = _evaluate(gold, pred, groups, cache).group_gaps.filter(**ICM).row(0, named=True)

    value = dict(zip(groups["doc_id"], groups["ward"], strict=True))
    names = sorted(set(value.values()))
    members = {g: [d for d in sorted(gold) if value.get(d) == g] for g in names}
    observed = {g: _icm_alone(gold, pred, docs, cache) for g, docs in members.items()}
    gap = max(observed.values()) - min(observed.values())
    assert row["gap"] == pytest.approx(gap, abs=1e-12)

    pooled = [d for g in names for d in members[g]]
    labels = np.concatenate([np.full(len(members[g]), k) for k, g in enumerate(names)])
    rng = np.random.default_rng(SEED)
    hits = 0
    for _ in range(PERMUTATIONS):
        shuffled = rng.permutation(labels)
        parts = [[d for d, k in zip(pooled, shuffled, strict=True) if k == j] for j in range(3)]
        values = [_icm_alone(gold, pred, part, cache) for part in parts]
        hits += max(values) - min(values) >= gap - 1e-12
    assert 0 < hits < PERMUTATIONS  # the test can tell a wrong draw or a wrong recount
    assert row["p_value"] == (1 + hits) / (1 + PERMUTATIONS)
    assert row["permutations"] == PERMUTATIONS
    assert row["p_adjusted"] == row["p_value"]  # one attribute: Holm changes nothing


def _two_halves(gold, good, bad):
    """Documents d*: the first half in group x, predicted by ``good``; the second in y by
    ``bad``."""
    docs = sorted(gold)
    half = len(docs) // 2
    pred = {d: (good if i < half else bad)(d) for i, d in enumerate(docs)}
    groups = pl.DataFrame({"doc_id": docs, "unit": ["x"] * half + ["y"] * (len(docs) - half)})
    return pred, groups


def test_groups_that_clearly_differ_get_the_smallest_p(small_zoo):
    gold, _, _, cache = small_zoo
    # x predicted perfectly (ICM_i = +IC(G_i)), y not at all (ICM_i = -IC(G_i))
    pred, groups = _two_halves(gold, good=lambda d: gold[d], bad=lambda d: set())
    row = _evaluate(gold, pred, groups, cache).group_gaps.filter(**ICM).row(0, named=True)
    assert row["high_group"] == "x" and row["gap"] > 1
    assert row["p_value"] == 1 / (1 + PERMUTATIONS)


def test_copies_of_one_group_are_exchangeable(small_zoo):
    gold, pred, _, cache = small_zoo
    # group y is group x again under other ids: same labels, same information content
    docs = sorted(gold)[:10]
    both = {**{d: gold[d] for d in docs}, **{f"z{d}": gold[d] for d in docs}}
    model = {**{d: pred.get(d, set()) for d in docs}, **{f"z{d}": pred.get(d, set()) for d in docs}}
    groups = pl.DataFrame({"doc_id": sorted(both), "unit": ["x"] * 10 + ["y"] * 10})
    row = _evaluate(both, model, groups, cache).group_gaps.filter(**ICM).row(0, named=True)
    assert row["gap"] == 0
    assert row["p_value"] == 1.0


def test_past_the_recount_bound_the_icm_gap_has_no_p_value(small_zoo, monkeypatch, caplog):
    from hieval.analysis import groups as module

    gold, pred, groups, cache = small_zoo
    monkeypatch.setattr(module, "ICM_RECOUNT_CALLS", 3 * PERMUTATIONS - 1)  # ward has 3 groups
    gaps = _evaluate(gold, pred, groups, cache).group_gaps
    row = gaps.filter(**ICM).row(0, named=True)
    assert row["p_value"] is None and row["p_adjusted"] is None and row["permutations"] is None
    assert row["low"] <= row["high"]  # the interval stays
    assert gaps.filter(family="flat")["p_value"].is_not_null().all()
    assert "no permutation p-value for the ICM gap of ward" in caplog.text
