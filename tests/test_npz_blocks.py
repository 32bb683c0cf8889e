"""A floating ``.npz`` score matrix (issue 36), in C or Fortran order, is decompressed a part at
a time into an ``.npy`` copy and read by blocks, with the long path's outputs bit for bit (the
long path forced with ``HIEVAL_DENSE_LONG=1`` is the reference); what the blocks do not take
(0/1 integers, several arrays, a damaged archive, a non-finite score, lists that do not fit)
is read or refused as the long path reads or refuses it."""

from __future__ import annotations

import zipfile

import numpy as np
import polars as pl
import pytest

from hieval.inputs.formats import Extras, dense
from hieval.metrics.blocked_rows import BLOCK_DOCS_VARIABLE
from tests.test_dense_wiring import _same_when_both_ran
from tests.test_long_blocks import (
    _both_ways,
    _compare_copied,
    _files,
)


def _matrix(pred: pl.DataFrame) -> tuple[np.ndarray, list[str], list[str]]:
    docs = pred["doc_id"].unique(maintain_order=True).to_list()
    codes = pred["code"].unique(maintain_order=True).to_list()
    wide = pred.pivot(on="code", index="doc_id", values="score").select(["doc_id", *codes])
    wide = wide.join(pl.DataFrame({"doc_id": docs}), on="doc_id", how="right")
    return wide.select(codes).to_numpy(), docs, codes


def _write_npz(folder, pred, *, compressed=True, fortran=False, dtype=None, **arrays):
    matrix, docs, codes = _matrix(pred)
    if dtype is not None:
        matrix = matrix.astype(dtype)
    matrix = np.asfortranarray(matrix) if fortran else np.ascontiguousarray(matrix)
    path = folder / "pred.npz"
    (np.savez_compressed if compressed else np.savez)(path, scores=matrix, **arrays)
    (folder / "pred.codes.txt").write_text("\n".join(codes) + "\n")
    (folder / "pred.docs.txt").write_text("\n".join(docs) + "\n")
    return path, matrix


@pytest.mark.parametrize(
    ("compressed", "dtype", "fortran", "extra"),
    [
        (True, np.float32, False, ()),
        (False, np.float64, True, ("--top-k", "4")),
        (True, np.float64, False, ("--threshold", "0.45", "--top-k", "6")),
        (True, np.float32, True, ()),
    ],
)
def test_an_npz_by_blocks_equals_the_long_path(
    tmp_path, monkeypatch, icd9_leaves, compressed, dtype, fortran, extra
):
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, "5")
    monkeypatch.setattr(dense, "COPY_CELLS", 50)  # copied 50 cells at a time
    pred = _files(tmp_path, icd9_leaves)
    path, _ = _write_npz(tmp_path, pred, compressed=compressed, dtype=dtype, fortran=fortran)
    _compare_copied(monkeypatch, tmp_path, path, *extra)


def test_the_copy_holds_the_members_cells(tmp_path, icd9_leaves):
    """Copies of every size give the member's cells, in its dtype and layout."""
    pred = _files(tmp_path, icd9_leaves)
    for cells, fortran in ((1, False), (23, True), (24, False), (1000, True), (1 << 23, False)):
        path, matrix = _write_npz(tmp_path, pred, dtype=np.float32, fortran=fortran)
        out = tmp_path / f"copy{cells}.npy"
        copied = dense.npz_score_matrix(
            path, "m", Extras(code_list=None, doc_list=None), out=out, cells=cells
        )
        assert copied.matrix.dtype == np.float32
        assert copied.matrix.flags["F_CONTIGUOUS"] == fortran
        assert np.array_equal(np.asarray(copied.matrix), matrix)
        assert copied.docs == (tmp_path / "pred.docs.txt").read_text().split()


@pytest.mark.parametrize(
    "oddity", ["decisions", "two arrays", "truncated", "nan", "short doc list"]
)
def test_what_the_blocks_do_not_take_is_read_as_the_long_path_reads_it(
    tmp_path, monkeypatch, capsys, icd9_leaves, oddity
):
    pred = _files(tmp_path, icd9_leaves)
    if oddity == "decisions":
        pred = pred.with_columns((pl.col("score") > 0.5).cast(pl.Int64))
    if oddity == "nan":
        pred = pred.with_columns(
            score=pl.when(pl.int_range(pl.len()) == 7).then(float("nan")).otherwise("score")
        )
    extra = {"other": np.zeros(3)} if oddity == "two arrays" else {}
    path, _ = _write_npz(tmp_path, pred, **extra)
    if oddity == "two arrays":  # no "scores" member: rename it
        with zipfile.ZipFile(path) as old, zipfile.ZipFile(tmp_path / "x.npz", "w") as new:
            for item in old.infolist():
                name = "matrix.npy" if item.filename == "scores.npy" else item.filename
                new.writestr(name, old.read(item))
        (tmp_path / "x.npz").replace(path)
    if oddity == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    if oddity == "short doc list":
        docs = tmp_path / "pred.docs.txt"
        docs.write_text("\n".join(docs.read_text().split()[:-1]) + "\n")
    results = _both_ways(monkeypatch, capsys, tmp_path, path)
    assert results[0] == results[1]
    assert (results[0][0] != 0) == (oddity in ("two arrays", "truncated", "nan", "short doc list"))
    assert not (tmp_path / "blocked/work/inputs/scores/m.matrix.npy").exists() or results[0][0] == 0
    _same_when_both_ran(tmp_path, results, reference=False)
