"""A wide Feather/Parquet table's score columns (Edin et al.'s ``_id``, ``target``, one score
column per code) as a dense matrix read by blocks (issue 36), instead of a long melt of every
cell in DuckDB.

Why: a wide table is a dense matrix stored by columns: its score columns are the code list,
its ``_id`` column the document list. Its record batches (Parquet row groups, Feather
batches) are copied, a block of documents at a time, into a ``.npy`` beside the scores
reference in the work folder, and the matrix path then takes over
(:mod:`hieval.inputs.dense_normalize`): decisions by blocks, the reference (the copy's path
and sha256) for ranking, tuning and the bootstrap. Memory: one block, not the cells.

The cells keep the long path's values to the last bit: DuckDB reads float32 columns, when
every score column is float32, through text (``CAST(CAST(score AS VARCHAR) AS DOUBLE)``: not
always the float32's own double), so those blocks are converted by the same DuckDB cast; a
table with a float64 column widens every float32 exactly, as DuckDB's UNPIVOT does.

A cell with no score (null) or a score that is not finite (NaN, an infinity) is refused here,
in the long path's words (:mod:`hieval.inputs.bad_scores`: the first such cell by row, then by
code), as the long path refuses it: a wide table is a matrix, and its every cell needs a score
(an empty cell is not an unscored pair, as a long file's missing row is). Why here: the long
path melts every cell before it finds the one; at 2,000 x 7,900 that ran out of memory under
the default limit, telling the user to raise it instead of naming the cell. The remaining
batches are still read (not copied), so that a damaged page later in the file is named by the
long path, as it names it first.

A table this reader does not take as it is (score columns that are not floating, an ``_id``
that is not a clean unique integer or string, names differing in case, no ``target``) returns
None and goes the long way, where every oddity has its message.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather
import pyarrow.parquet as pq

from hieval.atomic import atomic_path
from hieval.errors import InputError
from hieval.inputs.bad_scores import bad_score
from hieval.inputs.dense_decisions import BLOCK_DOCS
from hieval.inputs.formats import dense, locate
from hieval.inputs.formats.wide import ID, TARGET


class _NotTaken(Exception):
    """The table needs the long path (see the module)."""


class _BadCell(Exception):
    """The first cell (0-based ``row``, ``col``) without a finite score: ``value`` None where
    it is empty (null)."""

    def __init__(self, row: int, col: int, value: float | None) -> None:
        super().__init__(row, col, value)
        self.row, self.col, self.value = row, col, value


def score_matrix(path: Path, *, out: Path, name: str) -> dense.ScoreMatrix | None:
    """The wide table ``path``'s score columns copied to the ``.npy`` ``out`` by blocks and
    memory mapped, with its documents and codes; None where the long path must read it. A
    cell without a finite score is refused (see the module; ``name``: the file's name in
    the message)."""
    try:
        batches, schema, rows = _batches(path)
        codes = [n for n in schema.names if n not in (ID, TARGET)]
        dtype, through_text = _score_type(schema, codes)
        docs = _doc_ids(path, rows)
        _write(batches(codes), out, shape=(rows, len(codes)), dtype=dtype, text=through_text)
    except _BadCell as cell:
        out.unlink(missing_ok=True)
        refusal = _refusal(cell, path, name, docs=docs, codes=codes, float32=through_text)
        if refusal is None:
            return None
        raise refusal from None
    except (_NotTaken, OSError, pa.ArrowException, ValueError):
        out.unlink(missing_ok=True)
        return None
    matrix = np.load(out, mmap_mode="r", allow_pickle=False)
    lines = list(range(1, len(codes) + 1))
    return dense.ScoreMatrix(matrix, docs, codes, lines, path)


def _batches(path: Path):
    """A reader of record batches of given columns, the schema and the number of rows."""
    if path.suffix.lower() == ".parquet":
        parquet = pq.ParquetFile(path)
        schema, rows = parquet.schema_arrow, parquet.metadata.num_rows

        def read(columns):
            yield from parquet.iter_batches(batch_size=BLOCK_DOCS, columns=columns)

        return read, schema, rows
    reader = pa.ipc.open_file(pa.memory_map(str(path)))
    rows = _feather_rows(path)

    def read(columns):
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i).select(columns)

    return read, reader.schema, rows


def _feather_rows(path: Path) -> int:
    """The Feather file's rows, its batches read with their first column alone: a
    compressed (LZ4) batch is otherwise decompressed whole just to be counted."""
    first = pa.ipc.IpcReadOptions(included_fields=[0])
    reader = pa.ipc.open_file(pa.memory_map(str(path)), options=first)
    return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))


def _score_type(schema: pa.Schema, codes: list[str]) -> tuple[np.dtype, bool]:
    """The copy's dtype (float64) and whether the cells go through DuckDB's text cast (every
    score column float32)."""
    if not codes or len({c.lower() for c in codes}) != len(codes):
        raise _NotTaken
    if ID not in schema.names or TARGET not in schema.names:
        raise _NotTaken  # the long path names the missing column
    types = {schema.field(c).type for c in codes}
    if not all(pa.types.is_float32(t) or pa.types.is_float64(t) for t in types):
        raise _NotTaken
    return np.dtype(np.float64), types == {pa.float32()}


def _doc_ids(path: Path, rows: int) -> list[str]:
    """The ``_id`` column as text, as DuckDB casts it: integers or strings, none null, empty,
    padded or repeated (those the long path reads and refuses with their own words)."""
    if path.suffix.lower() == ".parquet":
        column = pq.read_table(path, columns=[ID]).column(ID)
    else:  # the column alone: read_all() decompresses every column of an LZ4 file
        column = feather.read_table(path, columns=[ID], memory_map=True).column(ID)
    kind = column.type
    if not (
        pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
    ):
        raise _NotTaken
    if column.null_count or len(column) != rows:
        raise _NotTaken
    docs = pc.cast(column, pa.string()).to_pylist()
    if len(set(docs)) != len(docs) or any(not d or d != d.strip() for d in docs):
        raise _NotTaken
    return docs


def cast_like_duckdb(values: np.ndarray) -> np.ndarray:
    """float32 ``values`` as the long path reads them: DuckDB's ``CAST(CAST(v AS VARCHAR) AS
    DOUBLE)`` (its text is not always the shortest: 0.126953125, not 0.12695312), on DuckDB's
    threads (one a core: a block of 1,024 x 7,900 cells took 0.69-0.84 s on one thread, 0.37-0.39
    s on two; the rows keep their order, DuckDB preserving insertion order)."""
    con = duckdb.connect()
    cells = pa.table({"v": np.ascontiguousarray(values).ravel()})  # noqa: F841 (by name)
    cast = con.sql("SELECT CAST(CAST(v AS VARCHAR) AS DOUBLE) AS v FROM cells")
    return cast.fetchnumpy()["v"].reshape(np.shape(values))


def _write(batches, out: Path, *, shape: tuple[int, int], dtype, text: bool) -> None:
    """Copy the batches' score columns into ``out`` (a ``.npy``), block by block; after a
    cell without a finite score, read the rest without copying it, then refuse that cell
    (:class:`_BadCell`)."""
    with atomic_path(out) as tmp:
        copy = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        start, bad = 0, None
        for batch in batches:
            if bad is None:
                block = np.column_stack([c.to_numpy(zero_copy_only=False) for c in batch.columns])
                bad = _first_bad_cell(block, batch, start)  # nulls read as NaN: bad cells too
                if bad is None:
                    copy[start : start + len(block)] = cast_like_duckdb(block) if text else block
            start += batch.num_rows
        if start != shape[0]:
            raise _NotTaken
        if bad is not None:
            raise bad
        copy.flush()
        del copy


def _first_bad_cell(block: np.ndarray, batch: pa.RecordBatch, start: int) -> _BadCell | None:
    """The block's first cell without a finite score, as the long path orders them: by row,
    then by code (its column's name); None when every cell is finite."""
    finite = np.isfinite(block)
    if finite.all():
        return None
    row = int(np.flatnonzero(~finite.all(axis=1))[0])
    names = batch.schema.names
    col = min(np.flatnonzero(~finite[row]).tolist(), key=lambda j: names[j])
    value = float(block[row, col]) if batch.column(col)[row].is_valid else None
    return _BadCell(start + row, col, value)


def _refusal(
    cell: _BadCell, path: Path, name: str, *, docs: list[str], codes: list[str], float32: bool
) -> InputError | None:
    """The long path's refusal of ``cell``: its row in the table, its document and code, its
    score as DuckDB writes it (``nan``, ``inf``, ``-inf``; none for an empty cell); None (the
    long path says it) where a score column's name is not the code the long path reads
    (padded or blank: it trims them)."""
    if any(not code or code != code.strip() for code in codes):
        return None
    text = None
    if cell.value is not None:
        kind = "FLOAT" if float32 else "DOUBLE"  # the type DuckDB's melt gives the cells
        con = duckdb.connect(config={"threads": 1})
        query = f"SELECT CAST(CAST($v AS {kind}) AS VARCHAR)"
        text = con.execute(query, {"v": cell.value}).fetchone()[0]
    row = cell.row + 1
    where = locate(path, "wide", name, [row])[row]
    return bad_score(name, where, score=text, doc=docs[cell.row], code=codes[cell.col])
