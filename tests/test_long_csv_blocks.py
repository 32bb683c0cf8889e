"""A long scored CSV or TSV file that scores every code for every document (issue 36) is
copied to Parquet by DuckDB, pivoted into a matrix and read by blocks, with the long path's
outputs bit for bit (the long path forced with ``HIEVAL_DENSE_LONG=1`` is the reference: it
reads the text itself); files that are not such a matrix, or whose values the long path
refuses, go the long way with its words, and the temporary copy never stays behind."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval.inputs import dense_long
from hieval.inputs.dense_scores import read_reference
from hieval.metrics.blocked_rows import BLOCK_DOCS_VARIABLE
from tests.test_dense_wiring import _same_when_both_ran
from tests.test_long_blocks import (
    _both_ways,
    _compare,
    _compare_copied,
    _files,
)

SEPARATORS = {"csv": ",", "tsv": "\t"}


def _write(pred: pl.DataFrame, path, *, separator: str) -> None:
    pred.write_csv(path, separator=separator)


def _no_copy_left(folder) -> None:
    assert not list(folder.rglob(".hieval-long-*"))


@pytest.mark.parametrize(
    ("kind", "dtype", "order", "extra"),
    [
        ("csv", pl.Float32, ("doc_id", "code"), ()),
        ("tsv", pl.Float64, ("code", "doc_id"), ("--top-k", "4")),
        ("csv", pl.Float64, ("code", "doc_id"), ("--threshold", "0.45", "--top-k", "6")),
    ],
)
def test_a_long_text_matrix_by_blocks_equals_the_long_path(
    tmp_path, monkeypatch, icd9_leaves, kind, dtype, order, extra
):
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, "5")
    monkeypatch.setattr(dense_long, "BATCH_ROWS", 100)  # documents straddle batches
    pred = _files(tmp_path, icd9_leaves, dtype=dtype, order=order)
    # Scores written with many digits: the text is what both paths cast to DOUBLE.
    pred = pred.with_columns(pl.col("score") + pl.int_range(pl.len()).cast(dtype) / 7919)
    path = tmp_path / f"pred.{kind}"
    _write(pred, path, separator=SEPARATORS[kind])
    _compare_copied(monkeypatch, tmp_path, path, *extra)
    _no_copy_left(tmp_path)


def test_quoted_values_are_read_as_the_long_path_reads_them(tmp_path, monkeypatch, icd9_leaves):
    """RFC 4180 quotes (a separator and a doubled quote inside a document's name)."""
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, "7")
    pred = _files(tmp_path, icd9_leaves)
    first = pred["doc_id"][0]
    odd = 'note, "A"'
    pred = pred.with_columns(pl.col("doc_id").replace(first, odd))
    gold = pl.read_csv(tmp_path / "gold.csv").with_columns(pl.col("doc_id").replace(first, odd))
    gold.write_csv(tmp_path / "gold.csv")
    path = tmp_path / "pred.csv"
    _write(pred, path, separator=",")
    assert '"note, ""A"""' in path.read_text()
    _long_out, blocked_out = _compare(monkeypatch, tmp_path, path)
    assert read_reference(blocked_out / "work/inputs/scores/m.parquet") is not None
    docs = pl.read_parquet(blocked_out / "work/counts/m/docs.parquet")["doc_id"]
    assert odd in docs.to_list()


@pytest.mark.parametrize(
    "oddity",
    ["missing pair", "repeated pair", "bad score", "nan score", "padded doc", "sparse",
     "extra column", "header case"],
)  # fmt: skip
def test_text_files_that_are_not_a_matrix_go_the_long_way(
    tmp_path, monkeypatch, capsys, icd9_leaves, oddity
):
    pred = _files(tmp_path, icd9_leaves).with_columns(pl.col("score").cast(pl.String))
    if oddity == "missing pair":
        pred = pred.slice(1)
    elif oddity == "repeated pair":
        pred = pl.concat([pred.slice(1), pred.slice(1, 1)])  # N x M rows, one pair twice
    elif oddity in ("bad score", "nan score"):
        value = "high" if oddity == "bad score" else "nan"
        pred = pred.with_columns(score=pl.when(pl.int_range(pl.len()) == 5).then(pl.lit(value))
                                 .otherwise(pl.col("score")))  # fmt: skip
    elif oddity == "padded doc":
        pred = pred.with_columns(pl.col("doc_id").replace(pred["doc_id"][3], " x "))
    elif oddity == "sparse":
        pred = pred.filter(pl.col("score").cast(pl.Float64) > 0.8)
    elif oddity == "extra column":
        pred = pred.with_columns(code_type=pl.lit("dx"))
    else:
        pred = pred.rename({"doc_id": "Doc_ID"})
    path = tmp_path / "pred.csv"
    _write(pred, path, separator=",")
    matrix = dense_long.score_matrix(path, out=tmp_path / "copy.npy")
    if oddity == "missing pair":  # most pairs scored: a matrix, its missing cell unscored
        assert matrix is not None and matrix.unscored == 1
    else:  # a non-finite score too: the long path names it
        assert matrix is None and not (tmp_path / "copy.npy").exists()
    _no_copy_left(tmp_path)
    results = _both_ways(monkeypatch, capsys, tmp_path, path)
    assert results[0] == results[1]
    if oddity in ("bad score", "nan score"):
        assert results[0][0] != 0 and "line" in results[0][1][-1]  # the long path names it
    _same_when_both_ran(tmp_path, results)
    _no_copy_left(tmp_path)


def test_the_sparse_check_reads_the_first_rows_only(tmp_path, monkeypatch, icd9_leaves):
    """A file of a few scores a document, told from its first rows: never copied."""
    pred = _files(tmp_path, icd9_leaves).filter(pl.col("score") > 0.8)  # under a quarter
    path = tmp_path / "pred.csv"
    _write(pred, path, separator=",")
    copies = []
    original = dense_long._parquet_matrix
    monkeypatch.setattr(
        dense_long, "_parquet_matrix", lambda *a, **k: copies.append(a) or original(*a, **k)
    )
    assert dense_long.score_matrix(path, out=tmp_path / "copy.npy") is None
    assert copies == []
    # every pair scored: copied and pivoted, the scores as DuckDB casts the text
    full = _files(tmp_path, icd9_leaves, seed=5)
    _write(full, path, separator=",")
    matrix = dense_long.score_matrix(path, out=tmp_path / "copy.npy")
    assert matrix is not None and len(copies) == 1
    text = pl.read_csv(path, infer_schema=False)  # each score as written, cast by Python
    row = {d: i for i, d in enumerate(matrix.docs)}
    col = {c: j for j, c in enumerate(matrix.codes)}
    assert sorted(row) == sorted(set(text["doc_id"])) and sorted(col) == sorted(set(text["code"]))
    expected = np.full((len(row), len(col)), np.nan)
    for doc, code, score in text.iter_rows():
        expected[row[doc], col[code]] = float(score)
    assert np.array_equal(np.asarray(matrix.matrix), expected)
    assert matrix.docs[0] == text["doc_id"][0] and matrix.codes[0] == text["code"][0]
    _no_copy_left(tmp_path)
