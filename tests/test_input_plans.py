"""Plans made from an input's header before anything is read (issue 36): a dense ``.npy``
(its header's shape and dtype), an ``.npz`` (its member's header) and a wide table (its
Parquet footer) whose normalisation cannot fit the memory limit are refused at once, naming
the shape, the bytes needed and the limit that fits; no file is normalised and no output
folder is left."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from hieval.cli import main
from hieval.errors import HievalError
from hieval.inputs.dense_normalize import LONG_PATH_VARIABLE
from hieval.resources import (
    BASE_BYTES,
    BYTES_PER_BLOCK_CELL,
    BYTES_PER_LONG_CELL,
    BYTES_PER_THREAD,
    DISTINCT_COPIES,
    Resources,
    input_shape,
)

FIXED_ONE_THREAD = BASE_BYTES + BYTES_PER_THREAD


def _dense(tmp_path, n_docs: int, n_codes: int, *, suffix: str = ".npy", dtype=np.float32):
    rng = np.random.default_rng(0)
    matrix = rng.random((n_docs, n_codes)).astype(dtype)
    path = tmp_path / f"m{suffix}"
    if suffix == ".npy":
        np.save(path, matrix)
    else:
        np.savez_compressed(path, scores=matrix)
    (tmp_path / "m.codes.txt").write_text("\n".join(f"C{j}" for j in range(n_codes)) + "\n")
    (tmp_path / "m.docs.txt").write_text("\n".join(f"d{i}" for i in range(n_docs)) + "\n")
    pl.DataFrame({"doc_id": ["d0"], "code": ["C0"]}).write_csv(tmp_path / "gold.csv")
    return path


def _wide(tmp_path, n_docs: int, n_codes: int):
    frame = pl.DataFrame(
        {"_id": list(range(n_docs)), "target": [["C0"]] * n_docs}
        | {f"C{j}": np.full(n_docs, 0.5) for j in range(n_codes)}
    )
    frame.write_parquet(tmp_path / "wide.parquet", row_group_size=7)
    return tmp_path / "wide.parquet"


def test_shapes_come_from_headers_and_footers(tmp_path, monkeypatch):
    monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
    npy = input_shape(_dense(tmp_path, 30, 20), role="predictions")
    assert (npy.docs, npy.codes, npy.itemsize, npy.blocked) == (30, 20, 4, True)
    assert npy.bytes() == BYTES_PER_BLOCK_CELL * 30 * 20  # one block: fewer docs than a block
    npz = input_shape(_dense(tmp_path, 30, 20, suffix=".npz"), role="predictions")
    assert (npz.docs, npz.codes, npz.blocked) == (30, 20, True)  # copied, then by blocks
    assert npz.bytes() == BYTES_PER_BLOCK_CELL * 30 * 20
    integers = tmp_path / "int-npz"
    integers.mkdir()
    npz = input_shape(_dense(integers, 30, 20, suffix=".npz", dtype=np.int64), role="predictions")
    assert (npz.docs, npz.codes, npz.blocked) == (30, 20, False)  # integer cells: long rows
    assert npz.bytes() == BYTES_PER_LONG_CELL * 30 * 20
    wide = input_shape(_wide(tmp_path, 30, 5), role="predictions")
    assert (wide.docs, wide.codes, wide.itemsize, wide.blocked) == (30, 5, 8, True)
    text = pl.DataFrame({"_id": [1], "target": [["C0"]], "C0": ["0.5"]})
    text.write_parquet(tmp_path / "text.parquet")
    assert not input_shape(tmp_path / "text.parquet", role="predictions").blocked
    assert input_shape(tmp_path / "wide.parquet", role="gold") is None  # its target lists
    assert input_shape(tmp_path / "gold.csv", role="gold") is None
    integers = tmp_path / "int"
    integers.mkdir()
    assert not input_shape(_dense(integers, 3, 2, dtype=np.int64), role="predictions").blocked
    monkeypatch.setenv(LONG_PATH_VARIABLE, "1")
    assert not input_shape(tmp_path / "m.npy", role="predictions").blocked


def test_a_block_plan_grows_with_the_block_not_the_documents(tmp_path):
    big = input_shape(_dense(tmp_path, 3000, 4), role="predictions")
    assert big.bytes() == BYTES_PER_BLOCK_CELL * 1024 * 4
    dev = input_shape(tmp_path / "m.npy", role="dev")  # and its distinct scores
    assert dev.bytes() == BYTES_PER_BLOCK_CELL * 1024 * 4 + (DISTINCT_COPIES * 4 + 1) * 3000 * 4


def _run(tmp_path, pred, limit: str):
    out = tmp_path / "out"
    args = ["evaluate", "--gold", str(tmp_path / "gold.csv"), "--pred", f"m={pred}"]
    args += ["--out", str(out), "--threads", "1", "--memory-limit", limit]
    args += ["--cache", str(tmp_path / "cache"), "--unknown-docs", "drop"]
    return main(args), out


@pytest.mark.parametrize(
    ("suffix", "dtype"), [(".npy", np.float32), (".npz", np.float32), (".npz", np.int64)]
)
def test_a_matrix_that_cannot_fit_is_refused_before_reading(
    tmp_path, monkeypatch, capsys, suffix, dtype
):
    """800MB leaves about 14 MB beyond one thread's fixed part: 100 x 5,000 float32 scores
    need 32 MB by blocks and 50 MB as long rows."""
    monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
    pred = _dense(tmp_path, 100, 5000, suffix=suffix, dtype=dtype)

    def never(*args, **kwargs):
        raise AssertionError("a file was read")

    monkeypatch.setattr("hieval.run.normalize_file", never)
    monkeypatch.setattr("hieval.run.build_tables", never)
    code, out = _run(tmp_path, pred, "800MB")
    assert code != 0
    err = capsys.readouterr().err
    assert f"model 'm': {pred} holds 100 x 5,000 (500,000) scores" in err
    assert "above --memory-limit 800MB" in err and "raise --memory-limit to 1GB or more" in err
    if dtype == np.float32:
        assert "read by blocks of 1,024 documents" in err
    else:
        assert "expanded to long rows" in err and "is read by blocks of documents" in err
    assert "Traceback" not in err and not out.exists()


def test_a_wide_table_is_planned_from_its_footer(tmp_path):
    wide = _wide(tmp_path, 1100, 300)  # 14.7 MB by blocks of 1,024 documents
    limit = f"{(FIXED_ONE_THREAD + 10 * 10**6) // 10**6}MB"
    with pytest.raises(HievalError, match=r"1,100 x 300 \(330,000\) scores"):
        Resources(threads=1, memory_limit=limit).check_inputs([("m", wide, "predictions")])
    Resources(threads=1, memory_limit="2GB").check_inputs([("m", wide, "predictions")])


def test_a_plan_that_fits_is_read(tmp_path, monkeypatch, icd9_leaves):
    monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
    pred = _dense(tmp_path, 100, 50)
    (tmp_path / "m.codes.txt").write_text("\n".join(icd9_leaves[:50]) + "\n")
    gold = pl.DataFrame({"doc_id": ["d0", "d1"], "code": icd9_leaves[:2]})
    gold.write_csv(tmp_path / "gold.csv")
    code, out = _run(tmp_path, pred, "2GB")
    assert code == 0 and (out / "metrics.parquet").is_file()


def test_long_rows_beyond_duckdbs_default_limit_are_refused_before_reading(
    tmp_path, monkeypatch, capsys
):
    """The process may have room (a big machine) while DuckDB's default limit (1.5 GiB; 10 MiB
    here) cannot hold the long rows: an ``.npz`` of 500,000 integer scores (50 MB as long rows)
    is refused at once, where DuckDB would run out of memory halfway; the same floating
    ``.npy`` is read by blocks and passes, and so does the floating ``.npz`` (copied)."""
    from hieval import resources
    from hieval.resources import MemorySource

    big = MemorySource(100 * 10**9, 100 * 10**9, "a big machine, from a test")
    monkeypatch.setattr(resources, "machine_memory", lambda *a, **k: big)
    monkeypatch.setattr(resources, "DEFAULT_DUCKDB_BYTES", 10 * 2**20)
    monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
    npy = _dense(tmp_path, 100, 5000)
    Resources(threads=1).check_inputs([("model 'm'", npy, "predictions")])
    npz = _dense(tmp_path, 100, 5000, suffix=".npz")
    Resources(threads=1).check_inputs([("model 'm'", npz, "predictions")])
    npz = _dense(tmp_path, 100, 5000, suffix=".npz", dtype=np.int64)
    monkeypatch.setattr("hieval.run.normalize_file", lambda *a, **k: 1 / 0)
    out = tmp_path / "out"
    args = ["evaluate", "--gold", str(tmp_path / "gold.csv"), "--pred", f"m={npz}"]
    args += ["--out", str(out), "--threads", "1", "--cache", str(tmp_path / "cache")]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "100 x 5,000 (500,000) scores; DuckDB needs about 0.1 GB" in err
    assert "above its limit, the default 10MiB (--memory-limit unset)" in err
    assert "raise --memory-limit to 1GB or more" in err
    assert "Traceback" not in err and not out.exists()
