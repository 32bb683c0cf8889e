"""A long scored Parquet file that scores every code for every document (``doc_id, code,
score``: N x M rows, each pair once) pivoted into a dense matrix by batches (issue 36), instead
of DuckDB's grouping and sorting of every row.

Why: a model that scores its whole label space, written out long, is a dense matrix spelled
out row by row; at MIMIC-IV's size that is 157M rows of text keys. Its documents and codes are
read once (each batch's distinct values), and if the file holds exactly every (document, code)
pair once, its scores are written, a batch at a time, into a ``.npy`` beside the scores
reference; the matrix path then takes over (:mod:`hieval.inputs.dense_normalize`), as for a
wide table (:mod:`hieval.inputs.dense_wide`). A float32 score column is widened exactly, as
DuckDB's ``TRY_CAST(score AS DOUBLE)`` reads it on the long path (a wide table's cells go
through text there instead).

Anything else returns None and goes the long way, which has every message: other columns or
types, a null, a padded or empty value, a missing or repeated pair (a file that scores most
codes but not all is not a matrix: its unscored pairs rank below every scored one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hieval.atomic import atomic_path
from hieval.inputs.formats import dense

COLUMNS = ("doc_id", "code", "score")
#: Rows per batch read.
BATCH_ROWS = 1 << 20


class _NotTaken(Exception):
    """The file needs the long path (see the module)."""


def score_matrix(path: Path, *, out: Path) -> dense.ScoreMatrix | None:
    """The scores of the long Parquet file ``path`` pivoted into the ``.npy`` ``out`` and
    memory mapped, with its documents and codes in order of first appearance; None where the
    long path must read it."""
    if path.suffix.lower() != ".parquet":
        return None
    try:
        parquet = pq.ParquetFile(path)
        _check_schema(parquet.schema_arrow)
        docs, codes = _values(parquet)
        if parquet.metadata.num_rows != len(docs) * len(codes):
            raise _NotTaken  # not every pair once (or repeats): not a matrix
        _pivot(parquet, out, docs=docs, codes=codes)
    except (_NotTaken, OSError, pa.ArrowException, ValueError):
        out.unlink(missing_ok=True)
        return None
    matrix = np.load(out, mmap_mode="r", allow_pickle=False)
    return dense.ScoreMatrix(matrix, docs, codes, list(range(1, len(codes) + 1)), path)


def _check_schema(schema: pa.Schema) -> None:
    """Refuse a file that is not ``doc_id, code, score`` of the types this reader takes."""
    if tuple(schema.names) != COLUMNS:
        raise _NotTaken
    doc, code, score = (schema.field(n).type for n in COLUMNS)
    if pa.types.is_dictionary(code):
        code = code.value_type
    if not (pa.types.is_integer(doc) or _is_text(doc)) or not _is_text(code):
        raise _NotTaken
    if not pa.types.is_floating(score) or pa.types.is_float16(score):
        raise _NotTaken


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _values(parquet: pq.ParquetFile) -> tuple[list[str], list[str]]:
    """The documents and codes, in order of first appearance, each clean text. A file whose
    first batch is far from holding every code for each of its documents (a file sorted by
    document or by code that is a matrix holds about all of them) is refused after that batch:
    most scored files keep a few scores a document, and must not pay for a full read."""
    docs: dict[str, None] = {}
    codes: dict[str, None] = {}
    batches = parquet.iter_batches(batch_size=BATCH_ROWS, columns=["doc_id", "code"])
    for number, batch in enumerate(batches):
        if batch.column(0).null_count or batch.column(1).null_count:
            raise _NotTaken
        new_docs = _text(batch.column(0)).unique().to_pylist()
        new_codes = _text(batch.column(1)).unique().to_pylist()
        if number == 0 and batch.num_rows < len(new_docs) * len(new_codes) // 2:
            raise _NotTaken  # the usual sparse file, told from its first batch alone
        docs.update(dict.fromkeys(new_docs))
        codes.update(dict.fromkeys(new_codes))
    for value in (*docs, *codes):
        if not value or value != value.strip():
            raise _NotTaken
    return list(docs), list(codes)


def _text(column: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return pc.cast(column, pa.string())


def _pivot(parquet: pq.ParquetFile, out: Path, *, docs, codes) -> None:
    """Write each row's score at its (document, code) cell; a pair given twice is refused
    (then, the rows being N x M, some pair is missing too)."""
    doc_set, code_set = pa.array(docs, pa.string()), pa.array(codes, pa.string())
    seen = np.zeros((len(docs), len(codes)), dtype=bool)
    with atomic_path(out) as tmp:
        copy = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float64, shape=seen.shape)
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=list(COLUMNS)):
            if batch.column(2).null_count:
                raise _NotTaken
            rows = pc.index_in(_text(batch.column(0)), value_set=doc_set).to_numpy()
            cols = pc.index_in(_text(batch.column(1)), value_set=code_set).to_numpy()
            scores = batch.column(2).to_numpy(zero_copy_only=False)  # float32: widened exactly
            if seen[rows, cols].any():
                raise _NotTaken
            seen[rows, cols] = True
            copy[rows, cols] = scores
        if not seen.all():
            raise _NotTaken
        copy.flush()
        del copy
