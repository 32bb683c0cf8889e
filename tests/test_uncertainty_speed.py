"""The fast bootstrap and randomization test against the straightforward computation they
replace: every replicate recounted from scratch by the point-estimate pipeline.

- A permutation swaps two models' outputs on some documents: the naive reference writes the
  two swapped prediction files and scores them as any model is scored; the p-values from its
  differences must equal :func:`randomization_p`'s exactly.
- A Poisson bootstrap replicate with integer weights is the test set with each document
  repeated that many times: the naive reference writes it and scores it (ICM's node weights
  kept from the real gold, as the bootstrap keeps them); every tidy row must match but PROP-F,
  whose empty-class weight the bootstrap holds at the real test set's size.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval.engine.icm import IcmParams
from hieval.hierarchy.table import write_level_table
from hieval.metrics.uncertainty.replicates import pair_plan, replicate_values, swapped_values
from hieval.metrics.uncertainty.settings import Settings
from hieval.metrics.uncertainty.tables import bootstrap_matrix, randomization_p, uncertainty_tables
from hieval.metrics.uncertainty.weights import doc_keys, poisson_weights, swaps
from hieval.pipeline import count_model, icm_weights, model_metrics, zoo_units

PARAMS = IcmParams()
MAX_LEVEL = "c"
PERMUTATIONS = 10


def score(folder, name, gold, pred, *, weights=None) -> dict:
    """The tidy rows of ``pred`` against ``gold`` (frames), as the workflow computes them."""
    out = folder / name
    out.mkdir()
    gold.write_parquet(out / "gold.parquet")
    pred.write_parquet(out / "pred.parquet")
    levels, ancestors = folder / "levels.parquet", folder / "ancestors.parquet"
    count_model(
        out / "gold.parquet", out / "pred.parquet", levels_file=levels, ancestors=ancestors,
        max_level=MAX_LEVEL, nodes_out=out / "nodes.parquet", docs_out=out / "docs.parquet",
        item_sums_out=out / "items.parquet", params=PARAMS, weights=weights,
    )  # fmt: skip
    tidy = model_metrics(
        model=name, nodes=out / "nodes.parquet", docs=out / "docs.parquet",
        item_sums=out / "items.parquet", levels_file=levels, params=PARAMS,
        label_set="observed", metrics_out=out / "metrics.parquet",
        nodes_report_out=out / "nodes.csv",
    )  # fmt: skip
    return {
        (r["family"], r["level"], r["average"], r["metric"]): r["value"]
        for r in tidy.iter_rows(named=True)
    }


@pytest.fixture(scope="module")
def zoo(tmp_path_factory, icd9, icd9_leaves):
    """A gold of 60 documents (one without codes) over ICD-9, two models and their tables."""
    folder = tmp_path_factory.mktemp("speed")
    write_level_table(icd9, folder / "levels.parquet", folder / "ancestors.parquet")
    rng = np.random.default_rng(8)
    pool = [*sorted(icd9_leaves)[:3000:11], "96.04", "99.04", "V58.11", "401.9"]
    docs = [f"d{i:02d}" for i in range(60)]
    gold = pl.DataFrame({"doc_id": rng.choice(docs, 300), "code": rng.choice(pool, 300)})
    gold = pl.concat(
        [gold.unique(), pl.DataFrame({"doc_id": ["empty"], "code": [None]}, schema=gold.schema)]
    ).sort("doc_id", "code")
    preds = {}
    for name, keep in (("a", 0.8), ("b", 0.6)):
        kept = gold.drop_nulls().filter(pl.Series(rng.random(gold.height - 1) < keep))
        noise = pl.DataFrame(
            {"doc_id": rng.choice([*docs, "empty"], 40), "code": rng.choice(pool, 40)}
        )
        preds[name] = pl.concat([kept, noise]).unique().sort("doc_id", "code")
    paths = {}
    tidy, items = {}, {}
    for name, pred in preds.items():
        tidy[name] = score(folder, name, gold, pred)
        paths[name] = folder / name / "pred.parquet"
        items[name] = folder / name / "items.parquet"
    layout, units = zoo_units(
        gold=folder / name / "gold.parquet", predictions=paths, item_sums=items,
        levels_file=folder / "levels.parquet", ancestors=folder / "ancestors.parquet",
        max_level=MAX_LEVEL, params=PARAMS, label_set="observed",
    )  # fmt: skip
    return folder, gold, preds, tidy, layout, units


def test_randomization_p_equals_recounting_every_swapped_pair(zoo):
    folder, gold, preds, tidy, layout, units = zoo
    keys = list(tidy["a"])
    doc_ids = layout.doc_ids.to_list()
    weights_key = doc_keys(doc_ids)
    s = swaps(weights_key, seed=4, first=0, count=PERMUTATIONS)
    observed = np.array([abs(tidy["a"][k] - tidy["b"][k]) for k in keys])
    hits = np.zeros(len(keys), dtype=np.int64)
    for r in range(PERMUTATIONS):
        swapped = pl.Series([d for d, bit in zip(doc_ids, s[r], strict=True) if bit])
        star = {
            side: pl.concat(
                [
                    preds[keep].filter(~pl.col("doc_id").is_in(swapped.implode())),
                    preds[other].filter(pl.col("doc_id").is_in(swapped.implode())),
                ]
            ).sort("doc_id", "code")
            for side, keep, other in (("a", "a", "b"), ("b", "b", "a"))
        }
        values = {side: score(folder, f"perm{r}{side}", gold, star[side]) for side in star}
        delta = np.array([abs(values["a"][k] - values["b"][k]) for k in keys])
        hits += delta >= observed - 1e-9 * np.maximum(1.0, observed)
    expected = (1 + hits) / (1 + PERMUTATIONS)
    settings = Settings(permutations=PERMUTATIONS, seed=4)
    p = randomization_p(
        units["a"], units["b"], keys, layout=layout, weights_key=weights_key, settings=settings
    )
    assert hits.max() > 0 and hits.min() < PERMUTATIONS  # the test can tell them apart
    mismatch = [(k, p[i], expected[i]) for i, k in enumerate(keys) if p[i] != expected[i]]
    assert not mismatch, mismatch[:5]


def test_swapped_values_equal_the_weighted_swap_of_the_tables(zoo):
    """The shortcut against the same tables summed with weights 1 − s and s (every row)."""
    *_, layout, units = zoo
    a, b = units["a"], units["b"]
    s = swaps(doc_keys(layout.doc_ids.to_list()), seed=9, first=0, count=64)
    plan = pair_plan(a, b, layout)
    # Every path is taken: nodes one document moves, looked-up nodes, and the busiest nodes.
    assert plan.index.shape[0] > 0
    assert any(part.totals[0].size for part in plan.parts.values())
    assert any(part.single.any() for part in plan.parts.values())
    fast_a, fast_b = swapped_values(plan, s, layout)
    slow_a = replicate_values([(a, 1 - s), (b, s)], layout)
    slow_b = replicate_values([(a, s), (b, 1 - s)], layout)
    assert fast_a.keys() == slow_a.keys()
    for key in slow_a:
        np.testing.assert_allclose(fast_a[key], slow_a[key], rtol=1e-12, atol=1e-12, err_msg=key)
        np.testing.assert_allclose(fast_b[key], slow_b[key], rtol=1e-12, atol=1e-12, err_msg=key)


def test_bootstrap_replicate_equals_the_test_set_with_documents_repeated(zoo):
    folder, gold, preds, tidy, layout, units = zoo
    weights_key = doc_keys(layout.doc_ids.to_list())
    keys = list(tidy["a"])
    replicates = bootstrap_matrix(
        units["a"], keys, layout=layout, weights_key=weights_key,
        settings=Settings(bootstrap=3, seed=11),
    )  # fmt: skip
    w = poisson_weights(weights_key, seed=11, first=0, count=3).astype(int)
    node_weights = folder / "a-weights.parquet"
    icm_weights(
        folder / "a" / "gold.parquet", folder / "a" / "pred.parquet",
        levels_file=folder / "levels.parquet", ancestors=folder / "ancestors.parquet",
        out=node_weights, params=PARAMS,
    )  # fmt: skip
    for r in range(3):
        copies = pl.DataFrame({"doc_id": layout.doc_ids, "copies": w[r]})

        def repeat(frame: pl.DataFrame, copies=copies) -> pl.DataFrame:
            out = frame.join(copies, on="doc_id").with_columns(
                pl.int_ranges(0, pl.col("copies")).alias("copy")
            )
            out = out.explode("copy").drop_nulls("copy")
            return out.select(pl.format("{}#{}", "doc_id", "copy").alias("doc_id"), "code").sort(
                "doc_id", "code"
            )

        values = score(folder, f"boot{r}", repeat(gold), repeat(preds["a"]), weights=node_weights)
        assert set(values) == set(keys)
        for i, key in enumerate(keys):
            if key[0] == "propensity":
                # PROP-F's empty-class weight depends on N, the test set's items: the bootstrap
                # holds it (and ICM's information content) at the real test set's, as documented.
                continue
            assert replicates[r, i] == pytest.approx(values[key], rel=1e-9, abs=1e-12), key


def test_tables_do_not_depend_on_the_number_of_threads(zoo):
    *_, tidy, layout, units = zoo
    frames = {
        name: pl.DataFrame(
            [(name, *k, v) for k, v in tidy[name].items()],
            schema=["model", "family", "level", "average", "metric", "value"],
            orient="row",
        )
        for name in tidy
    }
    settings = Settings(bootstrap=50, permutations=30, seed=2)
    one, two = (
        uncertainty_tables(
            frames, units, layout=layout, settings=settings, levels=layout.levels, threads=t
        )
        for t in (1, 2)
    )
    assert one[0].equals(two[0]) and one[1].equals(two[1])
