"""Bootstrap replicates of the ranking and calibration rows: weights all 1 reproduce
``score_rows``; integer weights are the test set with documents repeated (over the test set's
label space), recomputed from scratch by the point-estimate functions (AUC included; its own
oracles are in test_uncertainty_auc.py)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from test_ranking import make_case

from hieval.cli import main
from hieval.metrics.ranking import (
    arrays_from_pairs,
    calibration_values,
    encode,
    level_arrays,
    point_values,
    score_rows,
)
from hieval.metrics.uncertainty.ranking import ranking_replicates as replicate_values
from hieval.metrics.uncertainty.ranking import ranking_units
from hieval.metrics.uncertainty.settings import Settings
from hieval.metrics.uncertainty.tables import ranking_randomization_p
from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights, swaps

KS = (1, 3, 5)
LEVEL = "up"


def frames(seed: int, truncated: bool):
    gold, scores = make_case(seed, truncated=truncated, labels=9)
    docs = [f"d{d:02d}" for d in range(gold.shape[0])]
    codes = [f"c{c}" for c in range(gold.shape[1])]
    gold_rows = [(docs[d], codes[c]) for d, c in zip(*np.nonzero(gold), strict=True)]
    gold_rows += [(docs[d], None) for d in range(gold.shape[0]) if not gold[d].any()]
    scored = ~np.isnan(scores)
    score_rows_ = [
        (docs[d], codes[c], float(scores[d, c])) for d, c in zip(*np.nonzero(scored), strict=True)
    ]
    parent = {f"c{i}": f"p{i // 3}" for i in range(8)}  # c8 has no node at this level
    ancestors = pl.DataFrame(
        {"code": list(parent), "level": [LEVEL] * len(parent), "ancestor": list(parent.values())}
    )
    return (
        pl.DataFrame(gold_rows, schema=["doc_id", "code"], orient="row").sort("doc_id", "code"),
        pl.DataFrame(score_rows_, schema=["doc_id", "code", "score"], orient="row"),
        ancestors,
    )


@pytest.mark.parametrize("truncated", [False, True])
def test_all_ones_weights_give_every_row(truncated):
    gold, scores, ancestors = frames(4, truncated)
    doc_ids = gold["doc_id"].unique().sort()
    units = ranking_units(
        gold, scores, doc_ids=doc_ids, ks=KS, ancestors=ancestors, levels=(LEVEL,)
    )
    tidy, _ = score_rows(gold, scores, model="m", ks=KS, ancestors=ancestors, levels=(LEVEL,))
    expected = {
        (r["family"], r["level"], r["average"], r["metric"]): r["value"]
        for r in tidy.iter_rows(named=True)
    }
    assert set(units.keys) == set(expected)
    values = replicate_values([(units, np.ones((1, doc_ids.len())))], units.keys)
    for key, value in expected.items():
        assert values[key][0] == pytest.approx(value, rel=1e-12, abs=1e-15), key


def repeat(keys: np.ndarray, copies: np.ndarray, n: int, values: np.ndarray | None = None):
    """Pairs ``document × n + label`` with document d's pairs once per copy, documents
    renumbered in order (copy by copy); the label space stays the test set's."""
    doc, label = keys // n, keys % n
    first = np.concatenate([[0], np.cumsum(copies)[:-1]])
    times = copies[doc]
    offset = np.arange(times.sum()) - np.repeat(np.cumsum(times) - times, times)
    out = (np.repeat(first[doc], times) + offset) * n + np.repeat(label, times)
    return out, (None if values is None else np.repeat(values, times))


@pytest.mark.parametrize("truncated", [False, True])
def test_integer_weights_are_the_test_set_with_documents_repeated(truncated):
    gold, scores, ancestors = frames(5, truncated)
    doc_ids = gold["doc_id"].unique().sort()
    units = ranking_units(
        gold, scores, doc_ids=doc_ids, ks=KS, ancestors=ancestors, levels=(LEVEL,)
    )
    w = poisson_weights(doc_keys(doc_ids.to_list()), seed=3, first=0, count=4)
    replicates = replicate_values([(units, w)], units.keys)
    arrays = encode(gold, scores)
    n = arrays.n_labels
    for r in range(w.shape[0]):
        copies = w[r].astype(int)
        key, score = repeat(arrays.key, copies, n, arrays.score)
        gold_key, _ = repeat(arrays.gold_key, copies, n)
        repeated = arrays_from_pairs(int(copies.sum()), n, key, score, gold_key, arrays.labels)
        expected = {("ranking", "leaf", *k): v for k, v in point_values(repeated, KS).items()}
        pooled, _ = level_arrays(repeated, ancestors, LEVEL)
        expected |= {("ranking", LEVEL, *k): v for k, v in point_values(pooled, KS).items()}
        for average in ("micro", "scored"):
            calibration = calibration_values(repeated, average=average) or {}
            expected |= {("calibration", "leaf", average, k): v for k, v in calibration.items()}
        for key_ in units.keys:
            assert replicates[key_][r] == pytest.approx(expected[key_], rel=1e-12), (r, key_)


def test_ranking_randomization_p_equals_rescoring_the_swapped_score_tables():
    gold, scores_a, ancestors = frames(6, True)
    _, scores_b, _ = frames(7, False)
    doc_ids = gold["doc_id"].unique().sort()
    options = {"ks": KS, "ancestors": ancestors, "levels": (LEVEL,)}
    a, b = (ranking_units(gold, s, doc_ids=doc_ids, **options) for s in (scores_a, scores_b))
    keys = [k for k in a.keys if k in set(b.keys)]
    weights_key = doc_keys(doc_ids.to_list())
    permutations = 12
    settings = Settings(permutations=permutations, seed=5)
    p = ranking_randomization_p(a, b, keys, weights_key=weights_key, settings=settings)

    def rows(scores: pl.DataFrame) -> dict:
        tidy, _ = score_rows(gold, scores, model="m", **options)
        return {
            (r["family"], r["level"], r["average"], r["metric"]): r["value"]
            for r in tidy.iter_rows(named=True)
        }

    observed_a, observed_b = rows(scores_a), rows(scores_b)
    observed = np.array([abs(observed_a[k] - observed_b[k]) for k in keys])
    hits = np.zeros(len(keys), dtype=np.int64)
    s = swaps(weights_key, seed=5, first=0, count=permutations)
    for r in range(permutations):
        swapped = pl.Series(doc_ids.filter(pl.Series(s[r] == 1))).implode()
        star_a = pl.concat(
            [
                scores_a.filter(~pl.col("doc_id").is_in(swapped)),
                scores_b.filter(pl.col("doc_id").is_in(swapped)),
            ]
        )
        star_b = pl.concat(
            [
                scores_b.filter(~pl.col("doc_id").is_in(swapped)),
                scores_a.filter(pl.col("doc_id").is_in(swapped)),
            ]
        )
        va, vb = rows(star_a), rows(star_b)
        delta = np.array([abs(va[k] - vb[k]) for k in keys])
        hits += delta >= observed - 1e-9 * np.maximum(1.0, observed)
    assert hits.min() < permutations
    assert p.tolist() == ((1 + hits) / (1 + permutations)).tolist()


def test_cli_gives_ranking_and_calibration_rows_intervals_and_comparisons(tmp_path):
    rng = np.random.default_rng(1)
    codes = ["364.11", "364.24", "364.9", "401.9", "96.04", "250.00", "428.0", "584.9"]
    gold = {(f"doc{d:02d}", c) for d in range(40) for c in rng.choice(codes, 3, replace=False)}
    pl.DataFrame(sorted(gold), schema=["doc_id", "code"], orient="row").write_csv(
        tmp_path / "gold.csv"
    )
    args = ["evaluate", "--gold", str(tmp_path / "gold.csv"), "--out", str(tmp_path / "out")]
    for name, noise in (("sharp", 0.5), ("blunt", 0.9)):
        rows = [
            (
                f"doc{d:02d}",
                c,
                round(rng.random() * (1.0 if (f"doc{d:02d}", c) in gold else noise), 3),
            )
            for d in range(40)
            for c in codes
        ]
        pl.DataFrame(rows, schema=["doc_id", "code", "score"], orient="row").write_csv(
            tmp_path / f"{name}.csv"
        )
        args += ["--pred", f"{name}={tmp_path / name}.csv"]
    args += ["--max-level", "e0", "--bootstrap", "60", "--permutations", "19", "--k", "1", "3"]
    assert main(args) == 0
    out = tmp_path / "out"
    metrics = pl.read_parquet(out / "metrics.parquet")
    intervals = pl.read_parquet(out / "intervals.parquet")
    scored = pl.col("family").is_in(["ranking", "calibration"])
    expected = metrics.filter(scored)
    got = intervals.filter(scored)
    assert got.height == expected.height > 20
    assert (
        got.select(expected.columns).sort(expected.columns).equals(expected.sort(expected.columns))
    )
    macro_auc = (pl.col("average") == "macro") & (pl.col("metric") == "auc")
    method = pl.when(macro_auc).then(pl.lit("centred")).otherwise(pl.lit("percentile"))
    assert got["method"].to_list() == got.select(method).to_series().to_list()
    assert (got["low"] <= got["high"]).all()
    comparisons = pl.read_parquet(out / "comparisons.parquet").filter(scored)
    assert comparisons.height == expected.height // 2
    assert comparisons["p_value"].is_not_null().all()
