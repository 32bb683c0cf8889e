"""A long scored file that scores every code for every document (``doc_id, code, score``:
N x M rows, each pair once; Parquet, CSV or TSV) pivoted into a dense matrix by batches (issue
36), instead of DuckDB's grouping and sorting of every row.

Why: a model that scores its whole label space, written out long, is a dense matrix spelled
out row by row; at MIMIC-IV's size that is 157M rows of text keys. Its documents and codes are
read once (each batch's distinct values), and if the file holds exactly every (document, code)
pair once, its scores are written, a batch at a time, into a ``.npy`` beside the scores
reference; the matrix path then takes over (:mod:`hieval.inputs.dense_normalize`), as for a
wide table (:mod:`hieval.inputs.dense_wide`). A float32 score column is widened exactly, as
DuckDB's ``TRY_CAST(score AS DOUBLE)`` reads it on the long path (a wide table's cells go
through text there instead).

A file that scores many pairs but not all (at least :data:`MIN_SCORED_SHARE` of its documents
x codes: a model writing scores above 1e-4, or its top codes a document) is pivoted too, its
unscored cells ``-inf`` (:data:`hieval.inputs.dense_decisions.UNSCORED`): every blocked reader
treats such a cell as the long path treats an unscored pair (below every scored pair, tied
with the other unscored ones; after the scored codes in code order; a 0 for the micro
calibration, left out of the scored one; never decided). A sparser file goes the long way: its
matrix would be mostly cells of nothing, and its long rows are as quick.

Anything else returns None and goes the long way, which has every message: other columns or
types, a null or non-finite score, a padded or empty value, a repeated pair.

A CSV or TSV file is first copied by DuckDB into a Parquet file of the same rows, read as the
long path reads it (:func:`hieval.inputs.formats.long.read_csv`: text columns from the header,
RFC 4180 quotes, no sniffing; the score through ``TRY_CAST(score AS DOUBLE)``), in a temporary
folder beside the copy, removed once pivoted: the file's text is parsed once, in parallel,
instead of twice in Python. Its first rows are looked at before: the usual file of a
few scores a document goes the long way at once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hieval.atomic import atomic_path
from hieval.errors import InputError
from hieval.inputs.dense_decisions import UNSCORED
from hieval.inputs.formats import dense, long
from hieval.paths import duckdb_path

COLUMNS = ("doc_id", "code", "score")
#: Rows per batch read.
BATCH_ROWS = 1 << 20
#: The first rows of a CSV or TSV file looked at before it is copied: a matrix sorted by
#: document or by code holds about every code of their documents there too (at M = 7,900,
#: about 16 documents, or 6 codes of every document), and a sparse file is told in a few
#: milliseconds (a million rows: 0.13 s).
TEXT_CHECK_ROWS = 1 << 17
#: The least share of documents x codes a long file must score to be pivoted into a matrix
#: (its other cells unscored). Measured at 2,000 x 7,900 (benchmarks/RESULTS.md): at 15 % both
#: ways take the same time and memory, at 30 % the blocks are ahead (10.4 s, 1.4 GB against
#: 11.7 s, 1.7 GB), at 80 % far ahead (10.3 s, 1.5 GB against 23.5 s, 2.8 GB); the long
#: path's memory grows with the rows (about 100 bytes each), the blocks' does not.
MIN_SCORED_SHARE = 0.25


class _NotTaken(Exception):
    """The file needs the long path (see the module)."""


def score_matrix(
    path: Path, *, out: Path, duckdb_config: dict | None = None
) -> dense.ScoreMatrix | None:
    """The scores of the long file ``path`` (Parquet, CSV or TSV) pivoted into the ``.npy``
    ``out`` and memory mapped, with its documents and codes in order of first appearance; None
    where the long path must read it. ``duckdb_config`` bounds the copy of a CSV or TSV file
    (the run's threads and memory limit)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _parquet_matrix(path, out=out, source=path)
    separator = long.SEPARATORS.get(suffix)
    if separator is None or not _scored_header(path, separator):
        return None
    out.parent.mkdir(parents=True, exist_ok=True)  # the run's own folder, as atomic_path makes it
    with tempfile.TemporaryDirectory(prefix=".hieval-long-", dir=out.parent) as folder:
        copy = Path(folder) / "rows.parquet"
        try:
            if not _text_as_parquet(path, separator, copy, duckdb_config or {}):
                return None
        except (InputError, duckdb.Error, OSError, UnicodeError):
            return None  # the long path reads it again and says what is wrong
        return _parquet_matrix(copy, out=out, source=path)


def _scored_header(path: Path, separator: str) -> bool:
    """Whether the header of the CSV or TSV file ``path`` is ``doc_id, code, score`` (as the
    long path reads it): the first line only, so unscored files pay nothing more."""
    try:
        return tuple(long.check_header(path, path.name, separator)) == COLUMNS
    except (InputError, OSError, UnicodeError):
        return False  # the long path says what is wrong


def _text_as_parquet(path: Path, separator: str, copy: Path, config: dict) -> bool:
    """Copy the CSV or TSV file ``path`` (its header ``doc_id, code, score``) into the Parquet
    file ``copy`` as the long path reads it; False (nothing copied) when its first
    :data:`TEXT_CHECK_ROWS` rows are far from every code for each of their documents."""
    names = list(COLUMNS)
    con = duckdb.connect(config=config)
    try:
        rows = long.read_csv(
            con, path, names, separator, name=path.name, max_line_size=long.MAX_LINE_SIZE,
            what=long.LONG_WHAT,
        )  # fmt: skip
        rows.create_view("long_rows")
        n, docs, codes = con.execute(
            "SELECT count(*), count(DISTINCT doc_id), count(DISTINCT code) "
            f"FROM (SELECT doc_id, code FROM long_rows LIMIT {TEXT_CHECK_ROWS})"
        ).fetchone()
        if n < MIN_SCORED_SHARE * docs * codes:
            return False  # the usual sparse file, told from its first rows alone
        con.execute(
            "COPY (SELECT doc_id, code, TRY_CAST(score AS DOUBLE) AS score FROM long_rows) "
            "TO $copy (FORMAT parquet, COMPRESSION uncompressed)",
            {"copy": duckdb_path(copy)},
        )
    finally:
        con.close()
    return True


def _parquet_matrix(path: Path, *, out: Path, source: Path) -> dense.ScoreMatrix | None:
    """:func:`score_matrix` of the long Parquet file ``path`` (``source``'s rows)."""
    try:
        parquet = pq.ParquetFile(path)
        _check_schema(parquet.schema_arrow)
        docs, codes = _values(parquet)
        rows, cells = parquet.metadata.num_rows, len(docs) * len(codes)
        if rows > cells or rows < MIN_SCORED_SHARE * cells:
            raise _NotTaken  # repeats, or too few pairs scored for a matrix
        _pivot(parquet, out, docs=docs, codes=codes, partial=rows < cells)
    except (_NotTaken, OSError, pa.ArrowException, ValueError):
        out.unlink(missing_ok=True)
        return None
    matrix = np.load(out, mmap_mode="r", allow_pickle=False)
    return dense.ScoreMatrix(
        matrix, docs, codes, list(range(1, len(codes) + 1)), source, unscored=cells - rows
    )


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
        if number == 0 and batch.num_rows < MIN_SCORED_SHARE * len(new_docs) * len(new_codes):
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


def _pivot(parquet: pq.ParquetFile, out: Path, *, docs, codes, partial: bool) -> None:
    """Write each row's score at its (document, code) cell, the cells no row scores
    :data:`~hieval.inputs.dense_decisions.UNSCORED`; a pair given twice, or a score that is not
    finite (the long path names it), is refused."""
    doc_set, code_set = pa.array(docs, pa.string()), pa.array(codes, pa.string())
    seen = np.zeros((len(docs), len(codes)), dtype=bool)
    with atomic_path(out) as tmp:
        copy = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float64, shape=seen.shape)
        if partial:
            copy[:] = UNSCORED  # every cell unscored until a row scores it
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=list(COLUMNS)):
            if batch.column(2).null_count:
                raise _NotTaken
            rows = pc.index_in(_text(batch.column(0)), value_set=doc_set).to_numpy()
            cols = pc.index_in(_text(batch.column(1)), value_set=code_set).to_numpy()
            scores = batch.column(2).to_numpy(zero_copy_only=False)  # float32: widened exactly
            if not np.isfinite(scores).all() or seen[rows, cols].any():
                raise _NotTaken
            seen[rows, cols] = True
            copy[rows, cols] = scores
        if np.count_nonzero(seen) != parquet.metadata.num_rows:
            raise _NotTaken  # a pair repeated within a batch
        copy.flush()
        del copy
