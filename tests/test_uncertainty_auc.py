"""Bootstrap and randomization replicates of ROC-AUC (micro and macro, leaf and a level)
against scikit-learn's ``roc_auc_score`` on dense matrices built here: weights all 1 are the
point estimate, integer weights the test set with each document repeated, a swap the model
built by hand from two models' rows; p-values are recounted with scikit-learn per permutation.

Scores come from a few values (many ties), some pairs are unscored (a truncated score file:
scikit-learn sees them as a score below every real one, tied among themselves), one document
has no gold code, one code no gold document and one every document (both left out of macro).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import roc_auc_score
from test_ranking import make_case

from hieval.metrics.ranking import encode, score_rows
from hieval.metrics.uncertainty.auc import auc_pairs, auc_plan, auc_replicates
from hieval.metrics.uncertainty.ranking import auc_pair_plans, ranking_units
from hieval.metrics.uncertainty.ranking import ranking_replicates as replicate_values
from hieval.metrics.uncertainty.settings import Settings
from hieval.metrics.uncertainty.tables import label_set_rows, ranking_randomization_p
from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights, swaps

KS = (1, 3)
LEVEL = "up"
LABELS = 9
PARENT = {c: c // 3 for c in range(8)}  # code 8 has no node at the level (left out there)
BELOW = -1.0  # every score is in [0, 1]: an unscored pair as scikit-learn sees it


def frames(gold: np.ndarray, scores: np.ndarray) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The gold (a null code for a document without codes) and the scored pairs as tables."""
    docs = [f"d{d:02d}" for d in range(gold.shape[0])]
    codes = [f"c{c}" for c in range(gold.shape[1])]
    gold_rows = [(docs[d], codes[c]) for d, c in zip(*np.nonzero(gold), strict=True)]
    gold_rows += [(docs[d], None) for d in range(gold.shape[0]) if not gold[d].any()]
    scored = zip(*np.nonzero(~np.isnan(scores)), strict=True)
    rows = [(docs[d], codes[c], float(scores[d, c])) for d, c in scored]
    return (
        pl.DataFrame(gold_rows, schema=["doc_id", "code"], orient="row").sort("doc_id", "code"),
        pl.DataFrame(rows, schema=["doc_id", "code", "score"], orient="row"),
    )


ANCESTORS = pl.DataFrame(
    {
        "code": [f"c{c}" for c in PARENT],
        "level": [LEVEL] * len(PARENT),
        "ancestor": [f"p{p}" for p in PARENT.values()],
    }
)


def units(gold: np.ndarray, scores: np.ndarray):
    gold_frame, score_frame = frames(gold, scores)
    doc_ids = gold_frame["doc_id"].unique().sort()
    out = ranking_units(
        gold_frame, score_frame, doc_ids=doc_ids, ks=KS, ancestors=ANCESTORS, levels=(LEVEL,)
    )
    assert encode(gold_frame, score_frame).n_labels == LABELS  # the whole label space
    return out, doc_ids


def dense_level(gold: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max-pooled by hand: a node's score is its codes' highest (unscored: ``BELOW``), its
    gold whether any of its codes is gold."""
    full = np.where(np.isnan(scores), BELOW, scores)
    nodes = sorted(set(PARENT.values()))
    children = [[c for c, p in PARENT.items() if p == node] for node in nodes]
    return (
        np.column_stack([gold[:, cs].any(1) for cs in children]),
        np.column_stack([full[:, cs].max(1) for cs in children]),
    )


def sklearn_auc(gold: np.ndarray, full: np.ndarray) -> dict[str, float]:
    """micro: every cell; macro: the mean over columns with both classes (NaN: none)."""
    usable = [c for c in range(gold.shape[1]) if 0 < gold[:, c].sum() < gold.shape[0]]
    macro = [roc_auc_score(gold[:, c], full[:, c]) for c in usable]
    return {
        "micro": roc_auc_score(gold.ravel(), full.ravel()),
        "macro": float(np.mean(macro)) if macro else float("nan"),
    }


def expected(gold: np.ndarray, scores: np.ndarray) -> dict[tuple, float]:
    """Every AUC row of the tidy table, from scikit-learn."""
    leaf = sklearn_auc(gold, np.where(np.isnan(scores), BELOW, scores))
    level = sklearn_auc(*dense_level(gold, scores))
    out = {("ranking", "leaf", avg, "auc"): v for avg, v in leaf.items()}
    return out | {("ranking", LEVEL, avg, "auc"): v for avg, v in level.items()}


AUC_KEYS = [("ranking", lv, avg, "auc") for lv in ("leaf", LEVEL) for avg in ("micro", "macro")]


@pytest.mark.parametrize("truncated", [False, True])
def test_all_ones_weights_are_the_point_estimate_and_sklearn(truncated):
    gold, scores = make_case(21, truncated=truncated, labels=LABELS)
    model, doc_ids = units(gold, scores)
    assert set(AUC_KEYS) <= set(model.keys)
    values = replicate_values([(model, np.ones((2, doc_ids.len())))], AUC_KEYS)
    tidy, _ = score_rows(*frames(gold, scores), model="m", ks=KS, ancestors=ANCESTORS,
                         levels=(LEVEL,))  # fmt: skip
    point = {tuple(r[1:5]): r[5] for r in tidy.iter_rows()}
    oracle = expected(gold, scores)
    for key in AUC_KEYS:
        assert values[key].tolist() == pytest.approx([point[key]] * 2, rel=1e-12), key
        assert values[key][0] == pytest.approx(oracle[key], rel=1e-12), key


@pytest.mark.parametrize("truncated", [False, True])
def test_integer_weights_are_sklearn_on_repeated_documents(truncated):
    gold, scores = make_case(22, truncated=truncated, labels=LABELS)
    model, doc_ids = units(gold, scores)
    w = poisson_weights(doc_keys(doc_ids.to_list()), seed=4, first=0, count=6)
    w[0, :] = 0.0
    w[0, :4] = [1, 2, 0, 3]  # a replicate of three documents: few labels have both classes
    values = replicate_values([(model, w)], AUC_KEYS)
    checked = 0
    for r in range(w.shape[0]):
        copies = w[r].astype(int)
        repeated_gold, repeated_scores = np.repeat(gold, copies, 0), np.repeat(scores, copies, 0)
        oracle = expected(repeated_gold, repeated_scores)
        for key in AUC_KEYS:
            if np.isnan(oracle[key]):  # no label has both classes: the replicate is undefined
                assert np.isnan(values[key][r]), (r, key)
                continue
            assert values[key][r] == pytest.approx(oracle[key], rel=1e-12), (r, key)
            checked += 1
    assert checked >= 4 * (w.shape[0] - 1)


def two_models(label_spaces_differ: bool = False):
    gold, scores_a = make_case(23, truncated=True, labels=LABELS)
    rng = np.random.default_rng(5)
    scores_b = np.round(np.clip(scores_a + rng.choice([-0.2, 0.0, 0.2], scores_a.shape), 0, 1), 6)
    scores_b[rng.random(scores_b.shape) < 0.2] = np.nan
    if label_spaces_differ:
        # code 3 has no gold document; a scores it nowhere, so it is in b's label space only
        scores_a[:, 3] = np.nan
    return gold, scores_a, scores_b


def test_swapped_replicates_are_sklearn_on_the_model_built_by_hand():
    gold, scores_a, scores_b = two_models()
    a, doc_ids = units(gold, scores_a)
    b, _ = units(gold, scores_b)
    s = swaps(doc_keys(doc_ids.to_list()), seed=8, first=0, count=5)
    plans = auc_pair_plans(a, b)
    star_a = replicate_values([(a, 1.0 - s), (b, s)], AUC_KEYS, auc_plans=plans)
    unplanned = replicate_values([(a, 1.0 - s), (b, s)], AUC_KEYS)  # pooled per call
    star_b = replicate_values([(a, s), (b, 1.0 - s)], AUC_KEYS, auc_plans=plans)
    for r in range(s.shape[0]):
        swapped = s[r].astype(bool)[:, None]
        oracle_a = expected(gold, np.where(swapped, scores_b, scores_a))
        oracle_b = expected(gold, np.where(swapped, scores_a, scores_b))
        for key in AUC_KEYS:
            assert star_a[key][r] == pytest.approx(oracle_a[key], rel=1e-12), (r, key)
            assert unplanned[key][r] == star_a[key][r], (r, key)
            assert star_b[key][r] == pytest.approx(oracle_b[key], rel=1e-12), (r, key)


def test_a_swap_keeps_each_documents_pairs_over_its_own_models_label_space():
    """a's label space lacks code 3 (no gold, a never scores it), b's has it: the swapped
    model's documents from a have 8 pairs, those from b 9 (b's unscored code-3 pairs tie at
    the bottom as negatives), as the module's docstring says."""
    gold, scores_a, scores_b = two_models(label_spaces_differ=True)
    arrays_a, arrays_b = (encode(*frames(gold, s)) for s in (scores_a, scores_b))
    assert (arrays_a.n_labels, arrays_b.n_labels) == (LABELS - 1, LABELS)
    plan = auc_plan([auc_pairs(arrays_a), auc_pairs(arrays_b)])
    s = swaps(doc_keys([f"d{d:02d}" for d in range(gold.shape[0])]), seed=9, first=0, count=4)
    values = auc_replicates(plan, [1.0 - s, s])
    full_a, full_b = (np.where(np.isnan(x), BELOW, x) for x in (scores_a, scores_b))
    own = [c for c in range(LABELS) if c != 3]
    for r in range(s.shape[0]):
        keep, swap = s[r] == 0, s[r] == 1
        y = np.concatenate([gold[keep][:, own].ravel(), gold[swap].ravel()])
        x = np.concatenate([full_a[keep][:, own].ravel(), full_b[swap].ravel()])
        assert values["micro"][r] == pytest.approx(roc_auc_score(y, x), rel=1e-12)
        per_label = []
        for c in range(LABELS):
            rows = swap if c == 3 else np.ones(len(s[r]), dtype=bool)
            y = gold[rows, c]
            x = np.where(swap, full_b[:, c], full_a[:, c])[rows]
            if 0 < y.sum() < len(y):
                per_label.append(roc_auc_score(y, x))
        assert values["macro"][r] == pytest.approx(np.mean(per_label), rel=1e-12)


def test_p_values_are_recounted_with_sklearn_on_the_swapped_models():
    gold, scores_a, scores_b = two_models()
    a, doc_ids = units(gold, scores_a)
    b, _ = units(gold, scores_b)
    weights_key = doc_keys(doc_ids.to_list())
    permutations = 30
    p = ranking_randomization_p(
        a, b, AUC_KEYS, weights_key=weights_key,
        settings=Settings(permutations=permutations, seed=6),
    )  # fmt: skip
    observed_a, observed_b = expected(gold, scores_a), expected(gold, scores_b)
    observed = np.array([abs(observed_a[k] - observed_b[k]) for k in AUC_KEYS])
    hits = np.zeros(len(AUC_KEYS), dtype=np.int64)
    s = swaps(weights_key, seed=6, first=0, count=permutations)
    for r in range(permutations):
        swapped = s[r].astype(bool)[:, None]
        star_a = expected(gold, np.where(swapped, scores_b, scores_a))
        star_b = expected(gold, np.where(swapped, scores_a, scores_b))
        delta = np.array([abs(star_a[k] - star_b[k]) for k in AUC_KEYS])
        hits += delta >= observed - 1e-9 * np.maximum(1.0, observed)
    assert hits.max() > 0 and hits.min() < permutations  # the counts are not trivial
    assert p.tolist() == ((1 + hits) / (1 + permutations)).tolist()


def test_identical_models_give_p_one_and_a_clearly_better_model_a_small_p():
    gold, noisy = make_case(24, truncated=False, docs=60, labels=LABELS)
    rng = np.random.default_rng(3)
    sharp = np.where(
        np.isnan(noisy), np.nan, np.round(0.5 * gold + 0.5 * rng.random(gold.shape), 3)
    )
    a, doc_ids = units(gold, sharp)
    b, _ = units(gold, noisy)
    settings = Settings(permutations=99, seed=2)
    weights_key = doc_keys(doc_ids.to_list())
    same = ranking_randomization_p(a, a, AUC_KEYS, weights_key=weights_key, settings=settings)
    assert same.tolist() == [1.0] * len(AUC_KEYS)
    better = ranking_randomization_p(a, b, AUC_KEYS, weights_key=weights_key, settings=settings)
    assert min(expected(gold, sharp).values()) > max(expected(gold, noisy).values()) + 0.1
    assert better.max() <= 0.02, better


def test_macro_auc_gets_the_centred_interval_and_micro_auc_does_not():
    keys = [*AUC_KEYS, ("ranking", "leaf", "mean", "precision@5")]
    for label_set in ("observed", "hierarchy"):
        assert label_set_rows(keys, label_set).tolist() == [False, True, False, True, False]


def test_a_level_with_too_many_scored_pairs_gets_no_auc_rows_and_says_so(monkeypatch, caplog):
    """Above the cap, without the bootstrap's weights (the chunked replicates need them,
    tests/test_auc_uncapped.py), a level's AUC rows are left out of the replicates, the other
    rows stay, and the log names the model."""
    gold, scores = make_case(21, truncated=False, labels=LABELS)
    leaf_pairs = int((~np.isnan(scores)).sum())
    level_pairs = dense_level(gold, scores)[1].size
    assert level_pairs < leaf_pairs
    monkeypatch.setattr("hieval.metrics.uncertainty.ranking.AUC_MAX_SCORED_PAIRS", level_pairs)
    with caplog.at_level("WARNING", logger="hieval.metrics.uncertainty.ranking"):
        model, _ = units(gold, scores)
    assert not [k for k in model.keys if k[1] == "leaf" and k[3] == "auc"]
    assert ("ranking", LEVEL, "micro", "auc") in model.keys
    assert ("ranking", "leaf", "mean", "precision@1") in model.keys
    assert "model: " in caplog.text and "level leaf" in caplog.text


def test_undefined_replicates_are_left_out_of_the_interval_and_counted():
    """A row undefined in some replicates (NaN: an AUC replicate without a positive pair) gets
    the bounds of the defined ones and their number; undefined in all, null bounds."""
    from hieval.metrics.uncertainty.settings import Settings
    from hieval.metrics.uncertainty.tables import interval_rows

    tidy = pl.DataFrame(
        {
            "model": ["m"] * 3,
            "family": ["ranking"] * 3,
            "level": ["leaf"] * 3,
            "average": ["micro", "mean", "micro"],
            "metric": ["auc", "precision@1", "brier"],
            "value": [0.7, 0.5, 0.1],
        }
    )
    rng = np.random.default_rng(3)
    replicates = rng.uniform(0, 1, size=(200, 3))
    replicates[:50, 0] = np.nan
    replicates[:, 2] = np.nan
    rows = interval_rows(tidy, replicates, Settings(bootstrap=200), label_set="observed")
    defined = replicates[50:, 0]
    assert rows["replicates"].to_list() == [150, 200, 0]
    assert rows["low"][0] == pytest.approx(np.quantile(defined, 0.025))
    assert rows["high"][0] == pytest.approx(np.quantile(defined, 0.975))
    assert rows["low"][2] is None and rows["high"][2] is None
    assert rows["low"].null_count() == 1
