"""Sharding by document reduces exactly: split, count each shard, gather = one pass."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval.engine.icm import IcmParams
from hieval.hierarchy.table import write_level_table
from hieval.pipeline import (
    count_model,
    gather_counts,
    icm_weights,
    model_metrics,
    split_by_document,
)


@pytest.fixture(scope="module")
def hierarchy(tmp_path_factory, icd9):
    folder = tmp_path_factory.mktemp("h")
    write_level_table(icd9, folder / "levels.parquet", folder / "ancestors.parquet")
    return folder


def labels(tmp_path, icd9_leaves):
    rng = np.random.default_rng(5)
    codes = rng.choice(sorted(icd9_leaves)[:3000], 400)
    gold = pl.DataFrame({"doc_id": [f"d{i % 60}" for i in range(400)], "code": codes})
    gold = pl.concat(
        [gold.unique(), pl.DataFrame({"doc_id": ["empty"], "code": [None]}, schema=gold.schema)]
    )
    pred = gold.drop_nulls().sample(fraction=0.7, seed=1)
    noise = pl.DataFrame(
        {"doc_id": [f"d{i}" for i in range(60)], "code": rng.choice(sorted(icd9_leaves)[:3000], 60)}
    )
    pred = pl.concat([pred, noise, pl.DataFrame({"doc_id": ["empty"], "code": ["401.99"]})])
    gold.write_parquet(tmp_path / "gold.parquet")
    pred.unique().write_parquet(tmp_path / "pred.parquet")
    return tmp_path / "gold.parquet", tmp_path / "pred.parquet"


def run(tmp_path, hierarchy, gold, pred, shards, params):
    out = tmp_path / f"s{shards}"
    out.mkdir()
    levels, ancestors = hierarchy / "levels.parquet", hierarchy / "ancestors.parquet"
    weights = icm_weights(
        gold, pred, levels_file=levels, ancestors=ancestors, out=out / "w.parquet", params=params
    )
    assert weights.height
    golds = [out / f"g{i}.parquet" for i in range(shards)]
    preds = [out / f"p{i}.parquet" for i in range(shards)]
    split_by_document(gold, golds)
    split_by_document(pred, preds)
    parts = {"nodes": [], "docs": [], "items": []}
    for i in range(shards):
        paths = {k: out / f"{k}{i}.parquet" for k in parts}
        count_model(
            golds[i],
            preds[i],
            levels_file=levels,
            ancestors=ancestors,
            max_level="c",
            nodes_out=paths["nodes"],
            docs_out=paths["docs"],
            item_sums_out=paths["items"],
            params=params,
            weights=out / "w.parquet",
        )
        for k in parts:
            parts[k].append(paths[k])
    gather_counts(
        nodes=parts["nodes"],
        docs=parts["docs"],
        item_sums=parts["items"],
        nodes_out=out / "nodes.parquet",
        docs_out=out / "docs.parquet",
        item_sums_out=out / "items.parquet",
    )
    return model_metrics(
        model="m",
        nodes=out / "nodes.parquet",
        docs=out / "docs.parquet",
        item_sums=out / "items.parquet",
        levels_file=levels,
        params=params,
        label_set="observed",
        metrics_out=out / "metrics.parquet",
        nodes_report_out=out / "nodes.csv",
    )


@pytest.mark.parametrize("empty_gold", ["keep", "drop"])
def test_shards_reduce_exactly(tmp_path, hierarchy, icd9_leaves, empty_gold):
    gold, pred = labels(tmp_path, icd9_leaves)
    params = IcmParams(empty_gold=empty_gold)
    one = run(tmp_path, hierarchy, gold, pred, 1, params)
    four = run(tmp_path, hierarchy, gold, pred, 4, params)
    assert one.equals(four)  # every value, bit for bit, ICM and comparison metrics included
    for name in ("nodes", "docs", "items"):
        a = pl.read_parquet(tmp_path / "s1" / f"{name}.parquet")
        b = pl.read_parquet(tmp_path / "s4" / f"{name}.parquet")
        assert a.equals(b), name
    assert one.filter(pl.col("family") == "icm").height == 2


def test_split_is_stable_and_keeps_documents_whole(tmp_path, icd9_leaves):
    gold, _ = labels(tmp_path, icd9_leaves)
    outs = [tmp_path / f"x{i}.parquet" for i in range(3)]
    sizes = split_by_document(gold, outs)
    again = split_by_document(gold, [tmp_path / f"y{i}.parquet" for i in range(3)])
    assert sizes == again and sum(sizes) == pl.read_parquet(gold).height
    docs = [set(pl.read_parquet(o)["doc_id"]) for o in outs]
    assert not (docs[0] & docs[1] or docs[0] & docs[2] or docs[1] & docs[2])


@pytest.mark.parametrize("shards", [2, 4, 10])
def test_split_spreads_documents(tmp_path, shards):
    """Every shard gets a fair share (a hash reduced in floating point once filled only some)."""
    source = tmp_path / "labels.parquet"
    pl.DataFrame(
        {"doc_id": [f"doc{i}" for i in range(2000)], "code": ["401.9"] * 2000}
    ).write_parquet(source)
    sizes = split_by_document(source, [tmp_path / f"s{i}.parquet" for i in range(shards)])
    assert sum(sizes) == 2000
    assert min(sizes) > 0.6 * 2000 / shards, sizes


def test_split_keeps_every_row_and_writes_empty_shards(tmp_path):
    """More shards than documents: every row lands once, in order, and the shards no document
    hashes to are still written, with the columns (a count job reads every shard)."""
    table = pl.DataFrame(
        {"doc_id": ["a", "a", "b", "c"], "code": ["001.0", "002.1", None, "401.9"]}
    )
    table.write_parquet(tmp_path / "in.parquet")
    outs = [tmp_path / f"s{i}.parquet" for i in range(6)]
    sizes = split_by_document(tmp_path / "in.parquet", outs)
    shards = [pl.read_parquet(p) for p in outs]
    assert sizes == [s.height for s in shards] and sum(sizes) == table.height
    assert any(s.height == 0 for s in shards)
    assert all(s.columns == ["doc_id", "code"] for s in shards)
    assert pl.concat(shards).sort("doc_id", "code", nulls_last=True).equals(table)
    home: dict[str, int] = {}
    for index, shard in enumerate(shards):  # all of a document's rows land in one shard
        for doc in shard["doc_id"].to_list():
            assert home.setdefault(doc, index) == index
