"""A wide Feather/Parquet table (``_id``, ``target``, one score column per code) read by
blocks (issue 36) gives the long path's outputs bit for bit: the same table evaluated with
the long path forced (``HIEVAL_DENSE_LONG=1``: DuckDB's melt of every cell) and by blocks,
every output file and the input record compared; float32 columns through DuckDB's text cast
(not the float32's own double), float64 and mixed columns, integer and string ids, Parquet
row groups and Feather batches smaller than a block; tables the blocks do not take go the
long way with the long path's words."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from hieval import cli
from hieval.inputs.dense_normalize import LONG_PATH_VARIABLE
from hieval.inputs.dense_scores import read_reference
from hieval.metrics.blocked_rows import BLOCK_DOCS_VARIABLE
from tests.test_dense_wiring import _outputs, _same_bits, _same_when_both_ran

N_DOCS, N_CODES = 53, 29


def _table(icd9_leaves, *, seed=7, dtypes=("float32",), string_ids=False, grid=0.05, first_id=10):
    """Scores on a grid (ties) or continuous, a document without gold codes, a gold code
    outside the score columns."""
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(icd9_leaves), N_CODES + 1, replace=False)
    codes = [icd9_leaves[i] for i in picked[:N_CODES]]
    scores = rng.random((N_DOCS, N_CODES))
    if grid:
        scores = np.round(scores / grid) * grid
    ids = (
        [f"doc{i:03d}" for i in rng.permutation(N_DOCS)]
        if string_ids
        else list(rng.permutation(N_DOCS) * 3 + first_id)
    )
    target = []
    for i in range(N_DOCS):
        chosen = [codes[j] for j in np.flatnonzero(rng.random(N_CODES) < 0.1 + 0.4 * scores[i])]
        target.append([] if i == 2 else chosen)
    target[0].append(icd9_leaves[picked[-1]])
    columns = {"_id": pa.array(ids), "target": pa.array(target, pa.list_(pa.string()))}
    for j, code in enumerate(codes):
        dtype = dtypes[j % len(dtypes)]
        columns[code] = pa.array(scores[:, j].astype(dtype))
    return pa.table(columns)


def _write(table: pa.Table, folder, suffix: str):
    path = folder / f"wide{suffix}"
    if suffix == ".parquet":
        pq.write_table(table, path, row_group_size=11)
    else:
        feather.write_feather(table, path, chunksize=13)
    return path


def _evaluate(monkeypatch, folder, table_path, *extra, long: bool):
    out = folder / ("long" if long else "blocked")
    if long:
        monkeypatch.setenv(LONG_PATH_VARIABLE, "1")
    else:
        monkeypatch.delenv(LONG_PATH_VARIABLE, raising=False)
    argv = ["evaluate", "--gold", str(table_path), "--pred", f"m={table_path}",
            "--out", str(out), "--cache", str(folder / "cache"), *extra]  # fmt: skip
    code = cli.main(argv)
    return code, out


def _compare(monkeypatch, folder, table_path, *extra) -> dict:
    code, long_out = _evaluate(monkeypatch, folder, table_path, *extra, long=True)
    assert code == 0
    code, blocked_out = _evaluate(monkeypatch, folder, table_path, *extra, long=False)
    assert code == 0
    long, blocked = _outputs(long_out), _outputs(blocked_out)
    assert set(blocked) == set(long)
    assert blocked.pop("record") == long.pop("record")
    for name, frame in long.items():
        _same_bits(blocked[name], frame, name)
    assert long["metrics.parquet"].filter(pl.col("family") == "ranking").height > 20
    return {"long": long_out, "blocked": blocked_out}


CASES = {
    "float32, Parquet": ({"dtypes": ("float32",), "grid": 0}, ".parquet"),
    "float32 on a grid, Feather, string ids": (
        {"dtypes": ("float32",), "string_ids": True},
        ".feather",
    ),
    "float64, Parquet": ({"dtypes": ("float64",), "grid": 0}, ".parquet"),
    "mixed, Feather": ({"dtypes": ("float32", "float64"), "grid": 0}, ".feather"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_wide_table_by_blocks_equals_the_long_path(tmp_path, monkeypatch, icd9_leaves, case):
    options, suffix = CASES[case]
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, "7")
    table_path = _write(_table(icd9_leaves, **options), tmp_path, suffix)
    outs = _compare(monkeypatch, tmp_path, table_path, "--top-k", "5")
    reference = read_reference(outs["blocked"] / "work/inputs/scores/m.parquet")
    assert reference is not None and reference.path.endswith("m.matrix.npy")
    assert read_reference(outs["long"] / "work/inputs/scores/m.parquet") is None


def test_float32_scores_keep_duckdbs_text_cast(tmp_path, monkeypatch, icd9_leaves):
    """The float32 0.12695312 (exactly 0.126953125) reads as DuckDB's text 0.126953125, and
    0.1f as 0.1, not as the float32's double 0.10000000149...: the copy holds the long path's
    values."""
    table = _table(icd9_leaves, dtypes=("float32",))
    first = table.column_names[2]
    values = np.full(N_DOCS, 0.5, dtype=np.float32)
    values[:2] = [0.1, 0.126953125]
    table = table.set_column(2, first, pa.array(values))
    table_path = _write(table, tmp_path, ".parquet")
    outs = _compare(monkeypatch, tmp_path, table_path)
    reference = read_reference(outs["blocked"] / "work/inputs/scores/m.parquet")
    copy = np.load(reference.path)
    assert copy.dtype == np.float64
    assert copy[:2, 0].tolist() == [0.1, 0.126953125]
    assert float(np.float32(0.1)) != 0.1  # the float32's own double would differ


def test_tuned_on_a_wide_dev_table_by_blocks(tmp_path, monkeypatch, icd9_leaves):
    (tmp_path / "dev").mkdir()
    table_path = _write(_table(icd9_leaves), tmp_path, ".parquet")
    dev = _write(_table(icd9_leaves, seed=8, first_id=1000), tmp_path / "dev", ".parquet")
    # the dev table's codes differ: tuning per code runs over its own columns
    _compare(
        monkeypatch, tmp_path, table_path, "--threshold", "tune", "--dev-gold", str(dev),
        "--dev-pred", f"m={dev}", "--tuning-per-code", "--tuning-min-support", "1",
    )  # fmt: skip


@pytest.mark.parametrize("oddity", ["null cell", "NaN cell", "padded id", "integer scores"])
def test_tables_the_blocks_do_not_take_go_the_long_way(
    tmp_path, monkeypatch, capsys, icd9_leaves, oddity
):
    """A null or NaN score (refused, in the long path's words: the NaN after the blocks
    refused it), an id with spaces and integer score columns (read by the long path): the same
    exit code, message and outputs either way."""
    table = _table(icd9_leaves)
    first = table.column_names[2]
    if oddity in ("null cell", "NaN cell"):
        values = table.column(first).to_pylist()
        values[4] = None if oddity == "null cell" else float("nan")
        table = table.set_column(2, first, pa.array(values, pa.float32()))
    elif oddity == "padded id":
        ids = [str(i) for i in table.column("_id").to_pylist()]
        ids[3] = f" {ids[3]}"
        table = table.set_column(0, "_id", pa.array(ids))
    else:
        columns = table.column_names[2:]
        for j, name in enumerate(columns):
            ints = (np.asarray(table.column(name)) > 0.5).astype(np.int64)
            table = table.set_column(j + 2, name, pa.array(ints))
    table_path = _write(table, tmp_path, ".parquet")
    if oddity in ("null cell", "NaN cell"):  # refused in the long path's words
        messages = []
        for long in (True, False):
            capsys.readouterr()
            code, out = _evaluate(monkeypatch, tmp_path, table_path, long=long)
            assert code != 0 and not (out / "metrics.parquet").exists()
            errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
            messages.append(errors)
        assert messages[0] == messages[1] and len(messages[0]) == 1
        return
    code, long_out = _evaluate(monkeypatch, tmp_path, table_path, long=True)
    code_blocked, blocked_out = _evaluate(monkeypatch, tmp_path, table_path, long=False)
    assert code == code_blocked
    if code == 0:
        long, blocked = _outputs(long_out), _outputs(blocked_out)
        assert blocked.pop("record") == long.pop("record")
        for name, frame in long.items():
            _same_bits(blocked[name], frame, name)
        assert read_reference(blocked_out / "work/inputs/scores/m.parquet") is None
        assert not list(blocked_out.rglob("*.matrix.npy"))


def test_the_workflow_reads_a_wide_table_by_blocks_as_the_cli_does(
    tmp_path, monkeypatch, icd9_leaves
):
    """Snakemake's jobs pass the reference, whose copy sits beside it: the workflow's ranking
    and calibration rows equal the CLI's long path's, bit for bit."""
    from helpers import snakemake

    table_path = _write(_table(icd9_leaves), tmp_path, ".parquet")
    code, long_out = _evaluate(monkeypatch, tmp_path, table_path, long=True)
    assert code == 0
    (tmp_path / "models.tsv").write_text(f"model\tpredictions\nm\t{table_path}\n")
    config = tmp_path / "my.yaml"
    config.write_text(f"gold: {table_path}\nmodels: models.tsv\n")
    monkeypatch.delenv(LONG_PATH_VARIABLE)  # the workflow's jobs take the blocked path
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    reference = read_reference(tmp_path / "results/my/inputs/scores/m.parquet")
    assert reference is not None and reference.path.endswith("m.matrix.npy")
    ours = pl.read_parquet(tmp_path / "results/my/report/metrics.parquet")
    theirs = pl.read_parquet(long_out / "metrics.parquet")
    pick = pl.col("family").is_in(["ranking", "calibration"])
    assert ours.filter(pick).height > 20
    _same_bits(ours.filter(pick), theirs.filter(pick), "ranking rows")


@pytest.mark.parametrize(
    "flags",
    [
        # (not ``drop``: the long path crashes on a wide table with it, on main too:
        # DuckDB's "connection has an unfinished result" in _write_scores)
        ("--unknown-codes", "place", "--malformed-codes", "count"),
        ("--unknown-codes", "count", "--malformed-codes", "count"),
        (),  # the defaults: the malformed code refused
    ],
)
def test_odd_score_columns_as_on_the_long_path(
    tmp_path, monkeypatch, capsys, icd9, icd9_leaves, flags
):
    """A score column whose code the release lacks and one that is no code at all: the same
    outputs, or the same refusal, on both paths."""
    known = set(icd9.frame["code"].to_list())
    unknown = next(c for c in (f"{n}.{d}" for n in range(800, 999) for d in range(10))
                   if c not in known)  # fmt: skip
    table = _table(icd9_leaves)
    table = table.append_column(unknown, pa.array(np.linspace(0, 1, N_DOCS, dtype=np.float32)))
    table = table.append_column("hypertension", pa.array(np.full(N_DOCS, 0.7, np.float32)))
    table_path = _write(table, tmp_path, ".parquet")
    results = []
    for long in (True, False):
        capsys.readouterr()
        code, _out = _evaluate(monkeypatch, tmp_path, table_path, *flags, long=long)
        errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
        results.append((code, errors))
    assert results[0] == results[1]
    assert (results[0][0] != 0) == (flags == ())
    _same_when_both_ran(tmp_path, results, reference=True)
