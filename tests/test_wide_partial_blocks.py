"""A wide Feather/Parquet table whose cells are not all scored (issue 36): on the long path an
empty (null) cell is refused, not read as an unscored pair as a long file's missing row is
(measured: Parquet and Feather, float32 and float64, one cell or a whole column, all give
"empty score ... every code listed needs a score"). So a partly scored wide table does not go
by blocks with its empty cells unscored: the blocks refuse it themselves, in the long path's
words, without the long path's melt of every cell (at 2,000 x 7,900 that melt ran out of
memory under the default limit before it named the cell).

Each table is evaluated with the long path forced (``HIEVAL_DENSE_LONG=1``) and by blocks: the
same exit code and error line, and the blocks' run never normalises the predictions the long
way. The cell named is checked against the first empty or non-finite cell found here from the
table's own mask (by row, then by code), independently of both paths."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hieval import cli
from hieval.errors import InputError
from hieval.inputs import dense_wide, normalize
from hieval.inputs.dense_normalize import LONG_PATH_VARIABLE
from hieval.metrics.blocked_rows import BLOCK_DOCS_VARIABLE
from tests.test_dense_wiring import _same_when_both_ran
from tests.test_wide_blocks import N_CODES, N_DOCS, _evaluate, _table, _write


def _with_cells(table: pa.Table, cells: dict[tuple[int, int], float | None]) -> pa.Table:
    """``table`` with the score cells ``(row, score column)`` set to a value (None: null),
    each column keeping its type."""
    for j in sorted({col for _row, col in cells}):
        name = table.column_names[2 + j]
        kind = table.schema.field(name).type
        values = table.column(name).to_pylist()
        for (row, col), value in cells.items():
            if col == j:
                values[row] = value
        table = table.set_column(2 + j, name, pa.array(values, kind))
    return table


def _partial(table: pa.Table, share: float, *, seed: int) -> tuple[pa.Table, np.ndarray]:
    """``table`` with a random ``share`` of its score cells kept, the others null; the mask of
    the kept cells (documents x score columns)."""
    kept = np.random.default_rng(seed).random((N_DOCS, N_CODES)) < share
    columns = table.column_names[2:]
    for j, name in enumerate(columns):
        column = table.column(name).combine_chunks()
        values = column.to_numpy(zero_copy_only=False)
        table = table.set_column(2 + j, name, pa.array(values, column.type, mask=~kept[:, j]))
    return table, kept


def _first_bad(table: pa.Table, bad: np.ndarray) -> tuple[int, str, str]:
    """The first bad cell as a reader of the table by rows, then codes in text order, meets
    it: its 1-based row, its document and its code (computed here, from the mask alone)."""
    row = int(np.flatnonzero(bad.any(axis=1))[0])
    codes = table.column_names[2:]
    code = min(codes[j] for j in np.flatnonzero(bad[row]))
    return row + 1, str(table.column("_id")[row].as_py()), code


def _refusals(monkeypatch, capsys, folder, table_path, *extra) -> list[tuple[int, list[str]]]:
    """The long path's and the blocks' (exit code, error lines), and the blocks' run must not
    have normalised the predictions the long way (its gold, the table's ``target``, it may)."""
    long_way = normalize._normalize_in_duckdb
    roles: list[str] = []

    def spy(file, job):
        roles.append(job.role)
        return long_way(file, job)

    results = []
    for long in (True, False):
        capsys.readouterr()
        roles.clear()
        monkeypatch.setattr(normalize, "_normalize_in_duckdb", spy)
        code, out = _evaluate(monkeypatch, folder, table_path, *extra, long=long)
        errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        results.append((code, errors))
        if code != 0:
            assert not (out / "metrics.parquet").exists()
            assert not list(out.rglob("*.matrix.npy"))
        if not long:
            assert "predictions" not in roles
    return results


CASES = {
    "float32, Parquet": (("float32",), ".parquet"),
    "float32, Feather": (("float32",), ".feather"),
    "float64, Parquet": (("float64",), ".parquet"),
    "float64, Feather": (("float64",), ".feather"),
    "mixed, Parquet": (("float32", "float64"), ".parquet"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("seed", [1, 2])
def test_a_partly_scored_wide_table_is_refused_as_the_long_path_refuses_it(
    tmp_path, monkeypatch, capsys, icd9_leaves, case, seed
):
    """70-95 % of the cells scored, the others empty: refused on both paths in the same line,
    naming the first empty cell (by row, then by code)."""
    dtypes, suffix = CASES[case]
    rng = np.random.default_rng(seed)
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, str(int(rng.integers(1, 10))))
    table = _table(icd9_leaves, dtypes=dtypes, seed=seed, grid=0)
    table, kept = _partial(table, float(rng.uniform(0.7, 0.95)), seed=seed)
    table_path = _write(table, tmp_path, suffix)
    results = _refusals(monkeypatch, capsys, tmp_path, table_path, "--top-k", "5")
    assert results[0] == results[1]
    code, errors = results[0]
    row, doc, label = _first_bad(table, ~kept)
    assert code != 0 and len(errors) == 1
    assert f"{table_path}, row {row}: empty score (document '{doc}', code '{label}')" in errors[0]


BAD_CELLS = {
    # (row, score column): value; None is an empty cell
    "one empty cell in a late batch": {(40, 3): None},
    "NaN and an empty cell in one row": {(9, 0): float("nan"), (9, 5): None},
    "infinite cells and an empty one": {(20, 7): np.inf, (20, 2): -np.inf, (20, 11): None},
    "-inf alone": {(33, 1): -np.inf},
    "a whole empty column": {(i, 4): None for i in range(N_DOCS)},
}


@pytest.mark.parametrize("dtypes", [("float32",), ("float64",), ("float32", "float64")])
@pytest.mark.parametrize("cells", list(BAD_CELLS))
@pytest.mark.parametrize("suffix", [".parquet", ".feather"])
def test_empty_and_non_finite_cells_are_named_as_the_long_path_names_them(
    tmp_path, monkeypatch, capsys, icd9_leaves, dtypes, cells, suffix
):
    """The first bad cell (by row, then by code, whichever its kind) named with its score as
    DuckDB writes it ('nan', 'inf', '-inf') or as empty, the same on both paths, and the
    same as the cell found here."""
    monkeypatch.setenv(BLOCK_DOCS_VARIABLE, "7")
    table = _with_cells(_table(icd9_leaves, dtypes=dtypes, grid=0), BAD_CELLS[cells])
    table_path = _write(table, tmp_path, suffix)
    results = _refusals(monkeypatch, capsys, tmp_path, table_path)
    assert results[0] == results[1]
    code, errors = results[0]
    bad = np.zeros((N_DOCS, N_CODES), dtype=bool)
    for row, col in BAD_CELLS[cells]:
        bad[row, col] = True
    row, doc, label = _first_bad(table, bad)
    assert code != 0 and len(errors) == 1
    assert f"row {row}: " in errors[0] and f"(document '{doc}', code '{label}')" in errors[0]
    col = table.column_names.index(label) - 2
    value = BAD_CELLS[cells][(row - 1, col)]
    words = "empty score" if value is None else f"score '{str(value).lower()}' is not a finite"
    assert words in errors[0]


@pytest.mark.parametrize(
    "oddity",
    ["repeated id", "padded column name", "padded id", "no target column", "no target, no gap"],
)
def test_what_the_long_path_refuses_first_it_still_refuses(
    tmp_path, monkeypatch, capsys, icd9_leaves, oddity
):
    """An empty cell beside what the blocks leave to the long path (a repeated document, a
    score column whose name the long path trims, a padded id, a table without ``target``
    read as wide): the long path's own words on both paths. A table without ``target`` is
    refused even when every cell is scored."""
    table = _table(icd9_leaves)
    if oddity != "no target, no gap":
        table = _with_cells(table, {(6, 2): None})
    if oddity == "repeated id":
        ids = table.column("_id").to_pylist()
        ids[30] = ids[12]
        table = table.set_column(0, "_id", pa.array(ids))
    elif oddity == "padded column name":
        table = table.rename_columns([*table.column_names[:4], " 401.9", *table.column_names[5:]])
    elif oddity == "padded id":
        ids = [str(i) for i in table.column("_id").to_pylist()]
        ids[3] = f" {ids[3]}"
        table = table.set_column(0, "_id", pa.array(ids))
    else:
        table = table.drop_columns(["target"])
    table_path = _write(table, tmp_path, ".parquet")
    gold, extra = table_path, ()
    if oddity.startswith("no target"):  # the gold from elsewhere, the table read as wide
        gold = tmp_path / "gold.csv"
        gold.write_text(f"doc_id,code\n{table.column('_id')[0]},{table.column_names[3]}\n")
        extra = ("--format", "m=wide")
    results = []
    for long in (True, False):
        capsys.readouterr()
        monkeypatch.setenv(LONG_PATH_VARIABLE, "1" if long else "0")
        out = tmp_path / ("long" if long else "blocked")
        argv = ["evaluate", "--gold", str(gold), "--pred", f"m={table_path}", "--out", str(out),
                "--cache", str(tmp_path / "cache"), *extra]  # fmt: skip
        code = cli.main(argv)
        errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        results.append((code, errors))
    assert results[0] == results[1]
    code, errors = results[0]
    assert code != 0 and len(errors) == 1
    expected = {
        "repeated id": "appears more than once",
        "padded column name": "empty score",
        "padded id": "empty score",
        "no target column": "lacks column(s) ['target']",
        "no target, no gap": "lacks column(s) ['target']",
    }[oddity]
    assert expected in errors[0]


def test_the_blocks_refuse_the_cell_and_leave_no_copy(tmp_path, icd9_leaves):
    """:func:`dense_wide.score_matrix` itself: the refusal, no ``.npy`` left (not even a
    previous run's), and a whole table still copied."""
    table = _with_cells(_table(icd9_leaves, dtypes=("float64",)), {(17, 6): float("nan")})
    table_path = _write(table, tmp_path, ".parquet")
    out = tmp_path / "copy.npy"
    out.write_bytes(b"a previous run's copy")
    with pytest.raises(InputError, match=r"row 18: score 'nan' is not a finite number"):
        dense_wide.score_matrix(table_path, out=out, name="m")
    assert not out.exists() and not list(tmp_path.glob(".copy.npy.*"))
    (tmp_path / "whole").mkdir()
    whole = _write(_table(icd9_leaves), tmp_path / "whole", ".feather")
    matrix = dense_wide.score_matrix(whole, out=out, name="m")
    assert matrix is not None and matrix.matrix.shape == (N_DOCS, N_CODES)


def test_a_tuning_dev_table_with_an_empty_cell_is_refused_alike(
    tmp_path, monkeypatch, capsys, icd9_leaves
):
    """A dev table (``--dev-pred``) with an empty cell: the same refusal either way."""
    (tmp_path / "dev").mkdir()
    table_path = _write(_table(icd9_leaves), tmp_path, ".parquet")
    dev_table = _with_cells(_table(icd9_leaves, seed=8, first_id=1000), {(25, 9): None})
    dev = _write(dev_table, tmp_path / "dev", ".feather")
    extra = ("--threshold", "tune", "--dev-gold", str(dev), "--dev-pred", f"m={dev}")
    results = _refusals(monkeypatch, capsys, tmp_path, table_path, *extra)
    assert results[0] == results[1]
    assert results[0][0] != 0 and "row 26: empty score" in results[0][1][0]
    _same_when_both_ran(tmp_path, results)
