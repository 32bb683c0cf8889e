"""The Evaluator's reduced per-document tables (hieval.evaluator, pipeline.reduce_counts with
``in_order``): chunks whose documents come apart in document order are concatenated without a
sort, others sorted; either way the count and item tables equal one evaluate's, row for row and
bit for bit."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import hieval
from hieval import pipeline
from tests.test_evaluator_reduce import random_zoo, same


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("order", ["in order", "interleaved"])
def test_reduced_tables_equal_one_evaluate(icd9, cache, monkeypatch, order):
    sorted_parts: list[bool] = []
    reduce_counts = pipeline.reduce_counts

    def spy(nodes, docs, items, *, in_order=False):
        sorted_parts.append(in_order)
        return reduce_counts(nodes, docs, items, in_order=in_order)

    monkeypatch.setattr(pipeline, "reduce_counts", spy)
    gold, models = random_zoo(icd9.frame, 21, documents=36)
    docs = sorted(gold["doc_id"].unique().to_list())
    if order == "in order":
        parts = [docs[i : i + 6] for i in range(0, len(docs), 6)]
    else:
        parts = [docs[i::3] for i in range(3)]
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=1)  # a chunk per batch
    for part in parts:
        keep = pl.col("doc_id").is_in(part)
        evaluator.update(gold.filter(keep), {n: f.filter(keep) for n, f in models.items()})
    ours, whole = evaluator.compute(), hieval.evaluate(gold, models, cache=cache)
    assert sorted_parts == [order == "in order"] * len(models)
    same(ours, whole)
    for name in models:
        for table in ("docs", "item_sums"):
            path = f"work/counts/{name}/{table}.parquet"
            assert_frame_equal(
                pl.read_parquet(ours._folder / path),
                pl.read_parquet(whole._folder / path),
                check_exact=True,
            )
