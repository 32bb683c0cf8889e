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

A table this reader does not take as it is (score columns that are not floating, a null cell,
an ``_id`` that is not a clean unique integer or string, names differing in case) returns None
and goes the long way, where every oddity has its message.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hieval.atomic import atomic_path
from hieval.inputs.dense_decisions import BLOCK_DOCS
from hieval.inputs.formats import dense
from hieval.inputs.formats.wide import ID, TARGET


class _NotTaken(Exception):
    """The table needs the long path (see the module)."""


def score_matrix(path: Path, *, out: Path) -> dense.ScoreMatrix | None:
    """The wide table ``path``'s score columns copied to the ``.npy`` ``out`` by blocks and
    memory mapped, with its documents and codes; None where the long path must read it."""
    try:
        batches, schema, rows = _batches(path)
        codes = [n for n in schema.names if n not in (ID, TARGET)]
        dtype, through_text = _score_type(schema, codes)
        docs = _doc_ids(path, rows)
        _write(batches(codes), out, shape=(rows, len(codes)), dtype=dtype, text=through_text)
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
    rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))

    def read(columns):
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i).select(columns)

    return read, reader.schema, rows


def _score_type(schema: pa.Schema, codes: list[str]) -> tuple[np.dtype, bool]:
    """The copy's dtype (float64) and whether the cells go through DuckDB's text cast (every
    score column float32)."""
    if not codes or len({c.lower() for c in codes}) != len(codes) or ID not in schema.names:
        raise _NotTaken
    types = {schema.field(c).type for c in codes}
    if not all(pa.types.is_float32(t) or pa.types.is_float64(t) for t in types):
        raise _NotTaken
    return np.dtype(np.float64), types == {pa.float32()}


def _doc_ids(path: Path, rows: int) -> list[str]:
    """The ``_id`` column as text, as DuckDB casts it: integers or strings, none null, empty,
    padded or repeated (those the long path reads and refuses with their own words)."""
    if path.suffix.lower() == ".parquet":
        column = pq.read_table(path, columns=[ID]).column(ID)
    else:
        column = pa.ipc.open_file(pa.memory_map(str(path))).read_all().column(ID)
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
    DOUBLE)`` (its text is not always the shortest: 0.126953125, not 0.12695312)."""
    con = duckdb.connect(config={"threads": 1})
    cells = pa.table({"v": np.ascontiguousarray(values).ravel()})  # noqa: F841 (by name)
    cast = con.sql("SELECT CAST(CAST(v AS VARCHAR) AS DOUBLE) AS v FROM cells")
    return cast.fetchnumpy()["v"].reshape(np.shape(values))


def _write(batches, out: Path, *, shape: tuple[int, int], dtype, text: bool) -> None:
    """Copy the batches' score columns into ``out`` (a ``.npy``), block by block."""
    with atomic_path(out) as tmp:
        copy = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        start = 0
        for batch in batches:
            if any(column.null_count for column in batch.columns):
                raise _NotTaken  # an empty score: the long path names it
            block = np.column_stack([c.to_numpy(zero_copy_only=False) for c in batch.columns])
            if text:
                block = cast_like_duckdb(block)
            copy[start : start + len(block)] = block
            start += len(block)
        if start != shape[0]:
            raise _NotTaken
        copy.flush()
        del copy
