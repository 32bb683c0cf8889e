"""hieval.Evaluator: batches of documents give the numbers of one evaluation of them all (read
from the CLI's own metrics.parquet), and a document in two batches is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import hieval
from hieval import cli
from hieval.experiments.demo import make_demo


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def zoo(icd9):
    gold, predictions = make_demo(icd9.frame, seed=11, documents=60)
    # A mapping holds a (document, code) once: so do the files it is compared with.
    return gold, {
        n: predictions[n].unique(["doc_id", "code"], keep="first", maintain_order=True)
        for n in ("over_predictor", "cautious_coder")
    }


@pytest.fixture(scope="module")
def cli_metrics(tmp_path_factory, zoo, cache) -> pl.DataFrame:
    folder = tmp_path_factory.mktemp("cli")
    gold, predictions = zoo
    gold.write_parquet(folder / "gold.parquet")
    argv = ["evaluate", "--gold", str(folder / "gold.parquet"), "--out", str(folder / "out"),
            "--cache", str(cache), "--bootstrap", "10"]  # fmt: skip
    for name, frame in predictions.items():
        frame.write_parquet(folder / f"{name}.parquet")
        argv += ["--pred", f"{name}={folder / name}.parquet"]
    assert cli.main(argv) == 0
    return pl.read_parquet(folder / "out" / "metrics.parquet"), pl.read_parquet(
        folder / "out" / "intervals.parquet"
    )


def batches(frame: pl.DataFrame, docs: list[list[str]]) -> list[pl.DataFrame]:
    return [frame.filter(pl.col("doc_id").is_in(part)) for part in docs]


def split(gold: pl.DataFrame, parts: int) -> list[list[str]]:
    docs = gold["doc_id"].unique(maintain_order=True).to_list()
    return [list(part) for part in np.array_split(np.array(docs, dtype=object), parts)]


@pytest.mark.parametrize("parts", [1, 4, 7])
def test_batches_give_the_cli_numbers_of_all_documents(zoo, cache, cli_metrics, parts):
    gold, predictions = zoo
    docs = split(gold, parts)
    evaluator = hieval.Evaluator(cache=cache, bootstrap=10)
    golds = batches(gold, docs)
    models = {name: batches(frame, docs) for name, frame in predictions.items()}
    for i, gold_batch in enumerate(golds):
        evaluator.update(gold_batch, {name: models[name][i] for name in models})
    result = evaluator.compute()
    metrics, intervals = cli_metrics
    assert_frame_equal(result.metrics, metrics, check_exact=True)
    assert_frame_equal(result.intervals, intervals, check_exact=True)


def test_mapping_batches_in_the_order_of_documents_per_batch(zoo, cache, cli_metrics):
    gold, predictions = zoo
    docs = split(gold, 3)
    evaluator = hieval.Evaluator(cache=cache, bootstrap=10)
    for part in docs:

        def codes(frame, part=part):
            grouped = frame.filter(pl.col("doc_id").is_in(part)).group_by(
                "doc_id", maintain_order=True
            )
            if "score" in frame.columns:  # doc -> {code: score}
                rows = grouped.agg("code", "score").iter_rows()
                return {d: dict(zip(c, s, strict=True)) for d, c, s in rows}
            return {d: list(c) for d, c in grouped.agg("code").iter_rows()}

        evaluator.update(codes(gold), {name: codes(f) for name, f in predictions.items()})
    assert_frame_equal(evaluator.compute().metrics, cli_metrics[0], check_exact=True)


def test_a_document_in_two_batches_is_refused_and_the_batch_left_out(cache):
    evaluator = hieval.Evaluator(cache=cache)
    evaluator.update({"a": ["401.9"], "b": ["250.00"]}, {"m": {"a": ["401.9"]}})
    with pytest.raises(hieval.InputError, match=r"document 'b' came in an earlier batch"):
        evaluator.update({"b": ["428.0"], "c": ["V10.3"]}, {"m": {"c": ["V10.3"]}})
    evaluator.update({"c": ["V10.3"]}, {"m": {"c": ["V10.3"]}})
    once = hieval.evaluate({"a": ["401.9"], "b": ["250.00"], "c": ["V10.3"]},
                           {"m": {"a": ["401.9"], "c": ["V10.3"]}}, cache=cache)  # fmt: skip
    assert_frame_equal(evaluator.compute().metrics, once.metrics, check_exact=True)


def test_batches_of_dense_scores_pool_to_one_matrix(cache):
    codes, rng = ["401.9", "428.0", "250.00"], np.random.default_rng(3)
    scores = rng.random((6, 3))
    docs = [f"d{i}" for i in range(6)]
    gold = {d: [codes[i % 3]] for i, d in enumerate(docs)}
    evaluator = hieval.Evaluator(cache=cache)
    for rows in (slice(0, 2), slice(2, 6)):
        part = docs[rows]
        evaluator.update({d: gold[d] for d in part},
                         {"m": hieval.dense(scores[rows], codes=codes, doc_ids=part)})  # fmt: skip
    whole = hieval.evaluate(gold, {"m": hieval.dense(scores, codes=codes, doc_ids=docs)},
                            cache=cache)  # fmt: skip
    assert_frame_equal(evaluator.compute().metrics, whole.metrics, check_exact=True)
    with pytest.raises(hieval.InputError, match="codes differ"):
        reordered = hieval.dense(scores[:1], codes=codes[::-1], doc_ids=["z"])
        evaluator.update({"z": ["401.9"]}, {"m": reordered})


def test_a_batch_with_other_models_or_options_is_refused(cache):
    with pytest.raises(TypeError, match="nope"):
        hieval.Evaluator(cache=cache, nope=1)
    evaluator = hieval.Evaluator(cache=cache)
    evaluator.update({"a": ["401.9"]}, {"m": {"a": ["401.9"]}})
    with pytest.raises(hieval.InputError, match="every model"):
        evaluator.update({"b": ["401.9"]}, {"x": {"b": ["401.9"]}})
    with pytest.raises(hieval.InputError, match="no batch yet"):
        hieval.Evaluator(cache=cache).compute()
