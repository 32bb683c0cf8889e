"""A long scored Parquet file that scores every code for every document (issue 36) is pivoted
into a matrix by batches and read by blocks, with the long path's outputs bit for bit: the
same file evaluated with the long path forced (``HIEVAL_DENSE_LONG=1``) and by blocks, every
output file and the input record compared; files that are not such a matrix (a pair
repeated, a null score, other columns) go the long way with the long path's words (a pair
missing is an unscored cell: tests/test_long_partial_blocks.py)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval import cli
from hieval.inputs import dense_long
from hieval.inputs.dense_normalize import LONG_PATH_VARIABLE
from hieval.inputs.dense_scores import read_reference
from hieval.metrics.blocked_rows import BLOCK_DOCS_VARIABLE
from tests.test_dense_wiring import _outputs, _same_bits, _same_when_both_ran, _unknown_code

N_DOCS, N_CODES = 47, 23


def _files(folder, icd9_leaves, *, seed=2, dtype=pl.Float32, order=("doc_id", "code")):
    """Every (document, code) scored once (ties on a 0.05 grid), in ``order``; a gold with a
    document without gold codes dropped, a code outside the scored ones, and a document the
    predictions lack."""
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(icd9_leaves), N_CODES + 1, replace=False)
    codes = [icd9_leaves[i] for i in picked[:N_CODES]]
    docs = [f"d{int(i):03d}" for i in rng.permutation(N_DOCS)]
    scores = np.round(rng.random((N_DOCS, N_CODES)) * 20) / 20
    pred = pl.DataFrame(
        {
            "doc_id": np.repeat(docs, N_CODES),
            "code": np.tile(codes, N_DOCS),
            "score": scores.ravel(),
        }
    ).with_columns(pl.col("score").cast(dtype))
    pred = pred.sort(*order)
    gold = [(d, c) for i, d in enumerate(docs[1:]) for j, c in enumerate(codes)
            if rng.random() < 0.1 + 0.4 * scores[i + 1, j]]  # fmt: skip
    gold += [(docs[1], icd9_leaves[picked[-1]]), ("x_no_scores", codes[0])]
    pl.DataFrame(gold, schema=["doc_id", "code"], orient="row").write_csv(folder / "gold.csv")
    return pred


def _evaluate(monkeypatch, folder, pred_path, *extra, long: bool):
    out = folder / ("long" if long else "blocked")
    if long:
        monkeypatch.setenv(LONG_PATH_VARIABLE, "1")
    else:
        monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
    argv = ["evaluate", "--gold", str(folder / "gold.csv"), "--pred", f"m={pred_path}",
            "--out", str(out), "--cache", str(folder / "cache"), "--unknown-docs", "drop",
            *extra]  # fmt: skip
    return cli.main(argv), out


def _both_ways(monkeypatch, capsys, folder, pred_path, *extra) -> list[tuple[int, list[str]]]:
    """The exit code and error lines of the long path's run, then of the blocks' run."""
    results = []
    for long in (True, False):
        capsys.readouterr()
        code, _out = _evaluate(monkeypatch, folder, pred_path, *extra, long=long)
        errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        results.append((code, errors))
    return results


def _compare(monkeypatch, folder, pred_path, *extra):
    code, long_out = _evaluate(monkeypatch, folder, pred_path, *extra, long=True)
    assert code == 0
    code, blocked_out = _evaluate(monkeypatch, folder, pred_path, *extra, long=False)
    assert code == 0
    long, blocked = _outputs(long_out), _outputs(blocked_out)
    assert set(blocked) == set(long)
    assert blocked.pop("record") == long.pop("record")
    for name, frame in long.items():
        _same_bits(blocked[name], frame, name)
    return long_out, blocked_out


def _compare_copied(monkeypatch, folder, pred_path, *extra) -> None:
    """:func:`_compare`, and the blocks read the copy of the scores (the long path none),
    with ranking rows to compare."""
    long_out, blocked_out = _compare(monkeypatch, folder, pred_path, *extra)
    reference = read_reference(blocked_out / "work/inputs/scores/m.parquet")
    assert reference is not None and reference.path.endswith("m.matrix.npy")
    assert read_reference(long_out / "work/inputs/scores/m.parquet") is None
    metrics = pl.read_parquet(long_out / "metrics.parquet")
    assert metrics.filter(pl.col("family") == "ranking").height > 20


@pytest.mark.parametrize(
    ("dtype", "order", "extra"),
    [
        (pl.Float32, ("doc_id", "code"), ()),
        (pl.Float64, ("code", "doc_id"), ("--top-k", "4")),
        (pl.Float32, ("code", "doc_id"), ("--threshold", "0.45", "--top-k", "6")),
    ],
)
def test_a_long_matrix_by_blocks_equals_the_long_path(
    tmp_path, monkeypatch, icd9_leaves, dtype, order, extra
):
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, "5")
    monkeypatch.setattr(dense_long, "BATCH_ROWS", 100)  # documents straddle batches
    pred = _files(tmp_path, icd9_leaves, dtype=dtype, order=order)
    pred.write_parquet(tmp_path / "pred.parquet", row_group_size=64)
    _compare_copied(monkeypatch, tmp_path, tmp_path / "pred.parquet", *extra)


@pytest.mark.parametrize("oddity", ["missing pair", "repeated pair", "null score", "sparse"])
def test_files_that_are_not_a_matrix_go_the_long_way(
    tmp_path, monkeypatch, capsys, icd9_leaves, oddity
):
    pred = _files(tmp_path, icd9_leaves)
    if oddity == "missing pair":
        pred = pred.slice(1)
    elif oddity == "repeated pair":
        pred = pl.concat([pred.slice(1), pred.slice(1, 1)])  # N x M rows, one pair twice
    elif oddity == "null score":
        pred = pred.with_columns(score=pl.when(pl.int_range(pl.len()) == 5).then(None)
                                 .otherwise(pl.col("score")))  # fmt: skip
    else:
        pred = pred.filter(pl.col("score") > 0.8)
    path = tmp_path / "pred.parquet"
    pred.write_parquet(path)
    matrix = dense_long.score_matrix(path, out=tmp_path / "copy.npy")
    if oddity == "missing pair":  # most pairs scored: a matrix, its missing cell unscored
        assert matrix is not None and matrix.unscored == 1
    else:
        assert matrix is None and not (tmp_path / "copy.npy").exists()
    results = _both_ways(monkeypatch, capsys, tmp_path, path)
    assert results[0] == results[1]
    _same_when_both_ran(tmp_path, results)


@pytest.mark.parametrize(
    "flags",
    [
        ("--unknown-codes", "place", "--malformed-codes", "count"),
        ("--unknown-codes", "drop", "--malformed-codes", "count"),
        ("--unknown-codes", "count", "--malformed-codes", "count"),
        ("--unknown-codes", "error", "--malformed-codes", "count"),
        (),  # the defaults: the malformed code refused
    ],
)
def test_odd_codes_as_on_the_long_path(tmp_path, monkeypatch, capsys, icd9, icd9_leaves, flags):
    """A scored code the release lacks and one that is no code at all, under each policy:
    the same outputs, or the same refusal, on both paths (a refusal is the long path's own)."""
    pred = _files(tmp_path, icd9_leaves)
    docs = pred["doc_id"].unique(maintain_order=True)
    odd = pl.DataFrame(
        {
            "doc_id": pl.concat([docs, docs]),
            "code": [_unknown_code(icd9)] * len(docs) + ["hypertension"] * len(docs),
            "score": np.linspace(0, 1, 2 * len(docs)),
        }
    ).with_columns(pl.col("score").cast(pl.Float32))
    path = tmp_path / "pred.parquet"
    pl.concat([pred, odd]).sort("doc_id", "code").write_parquet(path)
    results = _both_ways(monkeypatch, capsys, tmp_path, path, *flags)
    assert results[0] == results[1]
    assert (results[0][0] != 0) == (flags == ())
    _same_when_both_ran(tmp_path, results, reference=True)
