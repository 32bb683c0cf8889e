"""Pooling normalised tables by copying their row groups (hieval.inputs.pooled): the pooled
table equals the parts concatenated and sorted by Polars, whichever writer wrote each part;
parts whose documents interleave, whose columns differ, or that hold no row are declined."""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

import hieval
from hieval import evaluator as evaluator_module
from hieval.inputs.pooled import pool_in_order
from tests.test_evaluator_reduce import random_zoo, same


def _labels(docs: list[str], *, seed: int, scored: bool) -> pl.DataFrame:
    """Rows of ``docs`` sorted as normalisation sorts them, a document without a code (a null
    code, first) among them."""
    import random

    rng = random.Random(seed)
    rows = []
    for doc in docs:
        codes = rng.sample(["401.9", "428.0", "250.00", "V10.3", "038.9", "E880.9"], 3)
        rows += [(doc, code) for code in codes] if doc[-1] != "3" else [(doc, None)]
    frame = pl.DataFrame(rows, schema={"doc_id": pl.String, "code": pl.String}, orient="row")
    if scored:
        frame = frame.with_columns(score=pl.Series([rng.random() for _ in rows]))
    return frame.sort(["doc_id", "code"], nulls_last=False)


def _write(frame: pl.DataFrame, path, how: str) -> None:
    """A part as one of the writers that write normalised tables would."""
    if how == "polars":
        frame.write_parquet(path, row_group_size=4)  # several row groups
    elif how == "arrow, plain":
        pq.write_table(frame.to_arrow(), path, use_dictionary=False)
    else:
        duckdb.sql(f"COPY (SELECT * FROM frame) TO '{path}' (FORMAT parquet)")


@pytest.mark.parametrize("scored", [False, True])
def test_pooled_table_equals_the_parts_sorted(tmp_path, scored):
    docs = [f"d{i:03d}" for i in range(40)]
    runs = [docs[0:9], docs[9:10], docs[10:25], docs[25:40]]
    frames = [_labels(run, seed=i, scored=scored) for i, run in enumerate(runs)]
    parts = []
    writers = ["duckdb", "polars", "arrow, plain", "polars"]
    for i, (frame, how) in enumerate(zip(frames, writers, strict=True)):
        parts.append(tmp_path / f"part{i}.parquet")
        _write(frame, parts[-1], how)
    empty = tmp_path / "empty.parquet"
    frames[0].head(0).write_parquet(empty)
    order = [parts[2], empty, parts[0], parts[3], parts[1]]  # not in document order
    out = tmp_path / "pooled.parquet"
    assert pool_in_order(order, out)
    expected = pl.concat(frames).sort(["doc_id", "code"], nulls_last=False)
    assert_frame_equal(pl.read_parquet(out), expected, check_exact=True)
    groups = sum(pq.ParquetFile(p).metadata.num_row_groups for p in parts)
    assert pq.ParquetFile(out).metadata.num_row_groups == groups  # copied, not regrouped
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*(p.name for p in parts), "empty.parquet", "pooled.parquet"]
    )


@pytest.mark.parametrize("case", ["interleaved", "touching", "columns differ", "no rows"])
def test_parts_it_cannot_copy_in_order_are_declined(tmp_path, case):
    first = _labels(["a1", "a2", "a5"], seed=1, scored=False)
    second = _labels(["a3", "a4"], seed=2, scored=False)
    if case == "touching":  # the same document at the end of one part, the start of the next
        second = _labels(["a5", "a6"], seed=2, scored=False)
    elif case == "columns differ":
        first, second = _labels(["a1"], seed=1, scored=True), _labels(["a2"], seed=2, scored=False)
    elif case == "no rows":
        first, second = first.head(0), second.head(0)
    parts = [tmp_path / "one.parquet", tmp_path / "two.parquet"]
    first.write_parquet(parts[0])
    second.write_parquet(parts[1])
    assert not pool_in_order(parts, tmp_path / "pooled.parquet")
    assert not (tmp_path / "pooled.parquet").exists()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize(("order", "copied"), [("reversed", True), ("interleaved", False)])
def test_evaluator_pools_by_copying_where_documents_come_in_runs(
    icd9, cache, monkeypatch, order, copied
):
    """The Evaluator's pooled tables come from :func:`pool_in_order` where the batches'
    documents come in runs, and its error analysis then joins the chunks' own analyses
    (taken from their counts' encodings) reading only the chunks' counted codes; from its
    sort otherwise, the analysis reading the pooled tables. Both equal one evaluate's, the
    analysis tables included (``same``)."""
    calls: list[bool] = []
    read: list[object] = []
    analysed: list[object] = []  # the chunks' own error analyses (hieval.analysis.parts)

    def spy(parts, out):
        calls.append(pool_in_order(parts, out))
        return calls[-1]

    def analysis(run, counted=None, *, inputs=None, parts=None, **others):
        read.append(inputs)
        analysed.append(parts)
        return error_analysis(run, counted, inputs=inputs, parts=parts, **others)

    error_analysis = evaluator_module.run._error_analysis
    monkeypatch.setattr(evaluator_module, "pool_in_order", spy)
    monkeypatch.setattr(evaluator_module.run, "_error_analysis", analysis)
    gold, models = random_zoo(icd9.frame, 8, documents=30)
    docs = sorted(gold["doc_id"].unique().to_list())
    if order == "interleaved":
        parts = [docs[i::3] for i in range(3)]
    else:
        parts = [docs[i : i + 10] for i in range(0, len(docs), 10)][::-1]
    evaluator = hieval.Evaluator(cache=cache, reduce_rows=1)  # a chunk per batch
    for part in parts:
        keep = pl.col("doc_id").is_in(part)
        evaluator.update(gold.filter(keep), {n: f.filter(keep) for n, f in models.items()})
    ours, whole = evaluator.compute(), hieval.evaluate(gold, models, cache=cache)
    assert (True in calls) == copied  # (a hard model's scores have no part to copy: False)
    assert (read[0] is not None) == copied  # (read[1]: the one evaluate's, None)
    assert (analysed[0] is not None) == copied
    if copied:
        assert set(analysed[0]) == set(models)
        assert all(len(p) == len(parts) for p in analysed[0].values())
    if copied:  # the gold's chunks, in document order: the batches came in reverse
        gold_parts = read[0][0]
        assert len(gold_parts) == len(parts)
        assert [p.parent.parent.parent.name for p in gold_parts] == [
            f"chunk-{i}" for i in range(len(parts), 0, -1)
        ]
    same(ours, whole)
    for table in sorted((whole._folder / "work" / "inputs").rglob("*.parquet")):
        name = table.relative_to(whole._folder)
        assert_frame_equal(pl.read_parquet(ours._folder / name), pl.read_parquet(table))


def test_a_table_in_parts_encodes_as_the_table_itself(tmp_path):
    """The engine's reader takes a table in parts (the Evaluator's chunks, in document order)
    as it takes the one file holding their rows."""
    import numpy as np

    from hieval.engine.keys import CodeSpace, encode
    from hieval.inputs.counted import counted_statuses, mark_counted

    runs = [[f"d{i:02d}" for i in range(a, b)] for a, b in ((0, 7), (7, 8), (8, 20))]
    gold = [_labels(run, seed=i, scored=False) for i, run in enumerate(runs)]
    pred = [_labels(run, seed=10 + i, scored=True) for i, run in enumerate(runs)]
    parts = {"gold": [], "pred": []}
    for kind, frames in (("gold", gold), ("pred", pred)):
        for i, frame in enumerate(frames):
            parts[kind].append(tmp_path / f"{kind}{i}.parquet")
            frame.write_parquet(parts[kind][-1])
        pl.concat(frames).write_parquet(tmp_path / f"{kind}.parquet")
    mark_counted(parts["pred"][2], {"E880.9": "unknown"})
    mark_counted(parts["pred"][0], {"038.9": "invalid"})
    tree = pl.DataFrame(
        {"code": ["401.9"], "level": ["leaf"], "ancestor": ["401.9"]},
    )
    space = CodeSpace.build(tree, ("leaf",))
    whole = encode(tmp_path / "gold.parquet", tmp_path / "pred.parquet", space)
    in_parts = encode(parts["gold"], parts["pred"], space)
    assert np.array_equal(in_parts.keys, whole.keys)
    assert in_parts.doc_ids.to_list() == whole.doc_ids.to_list()
    assert counted_statuses(parts["pred"]) == {"038.9": "invalid", "E880.9": "unknown"}
