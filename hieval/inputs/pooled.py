"""Normalised tables of separate runs of documents written as one, without hashing a string.

Why: :class:`hieval.Evaluator` normalises its batches chunk by chunk, then pools the chunks'
gold, decided labels and scores into the tables one evaluation writes for a whole input (the
error analysis, the model rows and :meth:`hieval.Evaluation.write` read those). Read into
Polars, concatenated and written again, every document id and code of every row was hashed
into a new dictionary: at 100× MIMIC-III that was 0.8 CPU-s, most of what the Evaluator spent
beyond one evaluate. Parquet keeps one dictionary per row group, so here each chunk's row
groups are read with their dictionaries (:data:`DICTIONARY_COLUMNS`) and written as they are:
the same rows in the same order, for about half the CPU.

It applies where the chunks' documents do not interleave (a validation loop's batches come in
document order, or in contiguous runs): concatenated in the order of their first documents,
tables that are each sorted by ``doc_id, code`` are then sorted as a whole. Otherwise
:func:`pool_in_order` declines, and the caller sorts. The same order lets a reader take the
chunks' files one after another (:func:`documents_in_order`) without waiting for the pooled
copy: the Evaluator's error analysis does.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hieval.atomic import atomic_path

#: The text columns of a normalised table, kept as the dictionaries their files hold.
DICTIONARY_COLUMNS = ("doc_id", "code")


def pool_in_order(parts: list[Path], out: Path) -> bool:
    """Write the rows of ``parts`` (normalised tables, each sorted by ``doc_id`` then
    ``code``) to ``out`` as one table sorted the same way, and return True; or write nothing
    and return False, when their ranges of documents interleave, their columns differ, or
    none has a row (the caller then pools them its own way).

    Written as normalisation writes a table (:func:`hieval.inputs.parquet_fast._write`):
    zstd, statistics for ``doc_id`` alone, no Arrow schema stored (readers see text, not
    categories); each part's row groups stay row groups."""
    ordered = documents_in_order(parts)
    if not ordered:
        return False
    tables = [_row_groups(part) for part in ordered]
    if any(t[0].column_names != tables[0][0].column_names for t in tables):
        return False
    schema = _common_schema(tables[0][0].schema)
    with (
        atomic_path(out) as tmp,
        pq.ParquetWriter(
            tmp, schema, compression="zstd", store_schema=False, write_statistics=["doc_id"]
        ) as writer,
    ):
        for group in itertools.chain.from_iterable(tables):
            writer.write_table(group.cast(schema), row_group_size=group.num_rows)
    return True


def documents_in_order(parts: list[Path]) -> list[Path] | None:
    """The ``parts`` that hold rows (normalised tables, each sorted by ``doc_id``), in the
    order whose concatenation is sorted by document, when their ranges of documents do not
    interleave; None otherwise. A reader of the table may then read the parts one after
    another (:data:`hieval.engine.keys.Source`) instead of a pooled copy. Python orders text
    by code point, as normalisation sorts it by its UTF-8 bytes."""
    bounds = []
    for part in parts:
        ends = _first_and_last(part)
        if ends is None:
            return None
        if ends:
            bounds.append((*ends, str(part), part))
    bounds.sort()
    if any(last >= first for (_, last, *_), (first, *_) in itertools.pairwise(bounds)):
        return None
    return [part for *_, part in bounds]


def _first_and_last(path: Path) -> tuple[str, str] | tuple[()] | None:
    """The first and last document of a part (an empty tuple when it has no row); None when
    either is not text (a null or a number: left to a sort)."""
    file = pq.ParquetFile(path, read_dictionary=["doc_id"])
    groups = [i for i in range(file.metadata.num_row_groups) if file.metadata.row_group(i).num_rows]
    if not groups:
        return ()
    first = file.read_row_group(groups[0], columns=["doc_id"]).column(0)[0].as_py()
    last = file.read_row_group(groups[-1], columns=["doc_id"]).column(0)[-1].as_py()
    if not isinstance(first, str) or not isinstance(last, str):
        return None
    return first, last


def _row_groups(path: Path) -> list[pa.Table]:
    """One part's row groups that hold rows, each with its text columns as the dictionary
    the file holds for that row group."""
    names = pq.read_schema(path).names
    keep = [name for name in DICTIONARY_COLUMNS if name in names]
    file = pq.ParquetFile(path, read_dictionary=keep)
    groups = (file.read_row_group(i) for i in range(file.metadata.num_row_groups))
    return [group for group in groups if group.num_rows]


def _common_schema(schema: pa.Schema) -> pa.Schema:
    """The parts' columns as one writer takes them: text as dictionaries of 32-bit indices,
    every column nullable (a part written by DuckDB and one by Arrow differ in both), no
    metadata (a part's own goes with it: the pooled table's is written by its caller)."""
    fields = []
    for field in schema:
        kind = field.type
        if field.name in DICTIONARY_COLUMNS:
            kind = pa.dictionary(pa.int32(), pa.string())
        fields.append(pa.field(field.name, kind, nullable=True))
    return pa.schema(fields)
