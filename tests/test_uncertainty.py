"""Bootstrap intervals and paired randomization tests: weights, coverage, error rates, and the
replicate formulas against the point estimates they must reproduce."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
import yaml
from helpers import REPO

from hieval.engine.icm import IcmParams
from hieval.engine.keys import LEAF
from hieval.hierarchy.table import write_level_table
from hieval.metrics.uncertainty.replicates import replicate_values
from hieval.metrics.uncertainty.settings import Settings
from hieval.metrics.uncertainty.tables import bootstrap_matrix, holm, randomization_p
from hieval.metrics.uncertainty.units import Layout, build_units
from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights, swaps
from hieval.pipeline import count_model, model_metrics, zoo_units

MICRO_F1 = ("flat", LEAF, "micro", "f1")


# -- weights ---------------------------------------------------------------------------------


def test_weights_depend_only_on_seed_document_and_replicate():
    ids = [f"doc{i}" for i in range(50)]
    keys = doc_keys(ids)
    w = poisson_weights(keys, seed=7, first=0, count=30)
    # Another document set, in another order, and a block starting elsewhere: same weights.
    other = doc_keys(["zzz", *reversed(ids[10:20])])
    again = poisson_weights(other, seed=7, first=5, count=25)
    assert np.array_equal(again[:, 1:], w[5:, 10:20][:, ::-1])
    assert not np.array_equal(poisson_weights(keys, seed=8, first=0, count=30), w)
    # The bootstrap and the swaps are different streams.
    s = swaps(keys, seed=7, first=0, count=30)
    assert set(np.unique(s)) <= {0.0, 1.0}
    assert not np.array_equal(s, (w > 0).astype(float))


def test_weights_are_poisson_one_and_swaps_fair_coins():
    keys = doc_keys([str(i) for i in range(4000)])
    w = poisson_weights(keys, seed=1, first=0, count=100)
    assert w.mean() == pytest.approx(1.0, abs=0.01)
    assert w.var() == pytest.approx(1.0, abs=0.02)
    assert (w == 0).mean() == pytest.approx(np.exp(-1), abs=0.005)
    assert swaps(keys, seed=1, first=0, count=100).mean() == pytest.approx(0.5, abs=0.005)


def test_holm_against_a_hand_worked_example():
    # Sorted 0.01, 0.03, 0.04 times 3, 2, 1: 0.03, 0.06, 0.04 -> monotone 0.03, 0.06, 0.06.
    assert holm(np.array([0.01, 0.04, 0.03])) == pytest.approx([0.03, 0.06, 0.06])
    assert holm(np.array([0.5, 0.9])) == pytest.approx([1.0, 1.0])


# -- synthetic flat zoos ---------------------------------------------------------------------


def flat_units(gold: np.ndarray, pred: np.ndarray, layout: Layout) -> object:
    """Units of a flat problem: ``gold``/``pred`` are documents × codes 0/1 matrices."""
    doc, code = np.nonzero(gold | pred)
    table = pl.DataFrame(
        {
            "doc": doc,
            "node": layout.nodes[LEAF].gather(pl.Series(code, dtype=pl.Int64)),
            "pred": pred[doc, code],
            "gold": gold[doc, code],
        },
        schema={"doc": pl.Int64, "node": pl.String, "pred": pl.Int64, "gold": pl.Int64},
    )
    n = gold.shape[0]
    items = pl.DataFrame(
        {
            "doc_id": layout.doc_ids,
            **{c: np.zeros(n) for c in ("ic_pred", "ic_gold", "ic_union")},
            **{
                c: np.zeros(n, dtype=np.int64)
                for c in ("anc_pred", "anc_gold", "anc_both", "lca_pred", "lca_gold", "lca_both")
            },
            **{c: np.ones(n) for c in ("w_pred", "w_gold", "w_both")},
        }
    )
    return build_units({LEAF: table}, items, layout=layout, params=IcmParams())


def flat_layout(n_docs: int, n_codes: int) -> Layout:
    return Layout(
        doc_ids=pl.Series("doc_id", [f"d{i:06d}" for i in range(n_docs)]),
        levels=(),
        nodes={LEAF: pl.Series("node", [f"c{j:03d}" for j in range(n_codes)])},
        split_kinds=False,
    )


class Population:
    """Codes j with gold prevalence g_j; a model predicts a gold code with probability
    ``hit``, a code not in the gold with probability b_j."""

    def __init__(self, codes: int = 15, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.g = rng.uniform(0.05, 0.4, codes)
        self.b = rng.uniform(0.01, 0.15, codes)

    def micro_f1(self, hit: float) -> float:
        tp = (self.g * hit).sum()
        fp = ((1 - self.g) * self.b).sum()
        fn = (self.g * (1 - hit)).sum()
        return 2 * tp / (2 * tp + fp + fn)

    def gold(self, rng, n):
        return (rng.random((n, self.g.size)) < self.g).astype(np.int64)

    def predict(self, rng, gold, hit):
        draw = rng.random(gold.shape)
        return np.where(gold == 1, draw < hit, draw < self.b).astype(np.int64)


def test_interval_of_micro_f1_covers_the_population_value():
    """Many test sets drawn from a known population: the 95% percentile interval of micro F1
    covers the population's micro F1 (the ratio of expected counts) in 90-99% of trials."""
    population, hit, trials, docs = Population(), 0.7, 300, 150
    truth = population.micro_f1(hit)
    layout = flat_layout(docs, population.g.size)
    keys = doc_keys(layout.doc_ids.to_list())
    rng = np.random.default_rng(2024)
    covered = 0
    for trial in range(trials):
        gold = population.gold(rng, docs)
        units = flat_units(gold, population.predict(rng, gold, hit), layout)
        settings = Settings(bootstrap=400, seed=trial)
        values = bootstrap_matrix(
            units, [MICRO_F1], layout=layout, weights_key=keys, settings=settings
        )[:, 0]
        low, high = np.quantile(values, [0.025, 0.975])
        covered += low <= truth <= high
    assert 0.90 <= covered / trials <= 0.99, covered / trials


def test_randomization_test_rejects_exchangeable_models_at_its_level():
    """Two models drawn from the same distribution: p < 0.05 in about 5% of test sets."""
    population, trials, docs = Population(seed=1), 300, 120
    layout = flat_layout(docs, population.g.size)
    keys = doc_keys(layout.doc_ids.to_list())
    rng = np.random.default_rng(7)
    rejected = 0
    for trial in range(trials):
        gold = population.gold(rng, docs)
        a, b = (flat_units(gold, population.predict(rng, gold, 0.6), layout) for _ in "ab")
        settings = Settings(permutations=199, seed=trial)
        p = randomization_p(a, b, [MICRO_F1], layout=layout, weights_key=keys, settings=settings)
        rejected += p[0] < 0.05
    assert 0.015 <= rejected / trials <= 0.10, rejected / trials


def test_identical_models_get_p_one_and_a_clearly_better_model_a_small_p():
    population, docs = Population(seed=3), 200
    layout = flat_layout(docs, population.g.size)
    keys = doc_keys(layout.doc_ids.to_list())
    rng = np.random.default_rng(3)
    gold = population.gold(rng, docs)
    good = flat_units(gold, population.predict(rng, gold, 0.9), layout)
    poor = flat_units(gold, population.predict(rng, gold, 0.4), layout)
    every = list(replicate_values([(good, np.ones((1, docs)))], layout))
    settings = Settings(permutations=499, seed=5)
    same = randomization_p(good, good, every, layout=layout, weights_key=keys, settings=settings)
    assert np.all(same == 1.0)
    better = randomization_p(
        good, poor, [MICRO_F1], layout=layout, weights_key=keys, settings=settings
    )
    assert better[0] == pytest.approx(1 / 500)


def test_micro_replicate_is_the_weighted_count_formula():
    """A replicate's micro F1 is 2·Σw·tp / (2·Σw·tp + Σw·fp + Σw·fn), computed by hand."""
    layout = flat_layout(40, 6)
    rng = np.random.default_rng(11)
    gold = (rng.random((40, 6)) < 0.3).astype(np.int64)
    pred = (rng.random((40, 6)) < 0.3).astype(np.int64)
    units = flat_units(gold, pred, layout)
    w = poisson_weights(doc_keys(layout.doc_ids.to_list()), seed=3, first=0, count=5)
    values = replicate_values([(units, w)], layout)
    tp, fp, fn = (gold & pred).sum(1), ((1 - gold) & pred).sum(1), (gold & (1 - pred)).sum(1)
    for r in range(5):
        t, f_p, f_n = w[r] @ tp, w[r] @ fp, w[r] @ fn
        assert values[MICRO_F1][r] == pytest.approx(2 * t / (2 * t + f_p + f_n), rel=1e-12)
        # Macro: per code, the weighted counts; the mean over the codes the replicate reaches.
        ct, cf, cn = (w[r] @ m for m in (gold & pred, (1 - gold) & pred, gold & (1 - pred)))
        reached = ct + cf + cn > 0
        f1 = np.where(reached, 2 * ct / np.maximum(2 * ct + cf + cn, 1e-300), 0)
        macro = values["flat", LEAF, "macro", "f1"][r]
        assert macro == pytest.approx(f1[reached].mean(), rel=1e-12)


# -- the real engine: all-ones weights are the point estimates -------------------------------


@pytest.fixture(scope="module")
def zoo(tmp_path_factory, icd9, icd9_leaves):
    """Gold and two models over the ICD-9 hierarchy, counted as the workflow counts them."""
    folder = tmp_path_factory.mktemp("zoo")
    write_level_table(icd9, folder / "levels.parquet", folder / "ancestors.parquet")
    rng = np.random.default_rng(5)
    pool = [*sorted(icd9_leaves)[:4000:7], "96.04", "99.04", "V58.11"]
    gold = pl.DataFrame(
        {"doc_id": [f"d{i % 80:03d}" for i in range(500)], "code": rng.choice(pool, 500)}
    ).unique()
    gold = pl.concat(
        [gold, pl.DataFrame({"doc_id": ["empty"], "code": [None]}, schema=gold.schema)]
    ).sort("doc_id", "code")
    gold.write_parquet(folder / "gold.parquet")
    preds = {}
    for name, keep in (("a", 0.8), ("b", 0.5)):
        kept = gold.drop_nulls().sample(fraction=keep, seed=len(name) + int(keep * 10))
        noise = pl.DataFrame(
            {"doc_id": [f"d{i:03d}" for i in range(80)], "code": rng.choice(pool, 80)}
        )
        extra = pl.DataFrame({"doc_id": ["empty", "d001"], "code": ["401.99", "364.99"]})
        preds[name] = folder / f"{name}.parquet"
        pl.concat([kept, noise, extra]).unique().sort("doc_id", "code").write_parquet(preds[name])
    return folder, preds


@pytest.mark.parametrize(("label_set", "empty_gold"), [("observed", "keep"), ("hierarchy", "drop")])
def test_all_ones_weights_give_every_tidy_value(zoo, icd9, label_set, empty_gold):
    """Every tidy row of the metrics table has a replicate formula, and a replicate whose
    weights are all 1 reproduces it (sums in another order: to 1e-9)."""
    folder, preds = zoo
    params = IcmParams(empty_gold=empty_gold)
    levels, ancestors = folder / "levels.parquet", folder / "ancestors.parquet"
    tidy, items = {}, {}
    for name, path in preds.items():
        out = folder / f"{name}-{label_set}"
        out.mkdir(exist_ok=True)
        count_model(
            folder / "gold.parquet", path, levels_file=levels, ancestors=ancestors,
            max_level="c", nodes_out=out / "nodes.parquet", docs_out=out / "docs.parquet",
            item_sums_out=out / "items.parquet", params=params,
        )  # fmt: skip
        items[name] = out / "items.parquet"
        tidy[name] = model_metrics(
            model=name, nodes=out / "nodes.parquet", docs=out / "docs.parquet",
            item_sums=items[name], levels_file=levels, params=params, label_set=label_set,
            metrics_out=out / "metrics.parquet", nodes_report_out=out / "nodes.csv",
        )  # fmt: skip
    layout, units = zoo_units(
        gold=folder / "gold.parquet", predictions=preds, item_sums=items, levels_file=levels,
        ancestors=ancestors, max_level="c", params=params, label_set=label_set,
    )  # fmt: skip
    ones = np.ones((1, layout.doc_ids.len()))
    for name in preds:
        values = replicate_values([(units[name], ones)], layout)
        rows = tidy[name].iter_rows(named=True)
        checked = 0
        for row in rows:
            key = (row["family"], row["level"], row["average"], row["metric"])
            assert key in values, key
            assert values[key][0] == pytest.approx(row["value"], rel=1e-9, abs=1e-12), key
            checked += 1
        assert checked == tidy[name].height > 300


def test_settings_defaults_are_the_schema_defaults():
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text("utf-8"))
    section = schema["properties"]["uncertainty"]["properties"]
    for field in dataclasses.fields(Settings):
        assert section[field.name]["default"] == field.default, field.name
