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
:func:`pool_in_order` declines, and the caller sorts.
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
    tables = [groups for groups in map(_row_groups, parts) if groups]
    if not tables or any(t[0].column_names != tables[0][0].column_names for t in tables):
        return False
    ordered = _in_document_order(tables)
    if ordered is None:
        return False
    schema = _common_schema(tables[0][0].schema)
    with (
        atomic_path(out) as tmp,
        pq.ParquetWriter(
            tmp, schema, compression="zstd", store_schema=False, write_statistics=["doc_id"]
        ) as writer,
    ):
        for group in itertools.chain.from_iterable(ordered):
            writer.write_table(group.cast(schema), row_group_size=group.num_rows)
    return True


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


def _in_document_order(tables: list[list[pa.Table]]) -> list[list[pa.Table]] | None:
    """The parts (each its row groups) in an order whose concatenation is sorted by
    document, when their ranges of documents do not interleave; None otherwise. Python orders
    text by code point, as normalisation sorts it by its UTF-8 bytes."""
    bounds = []
    for i, groups in enumerate(tables):
        first, last = groups[0].column("doc_id")[0].as_py(), groups[-1].column("doc_id")[-1].as_py()
        if not isinstance(first, str) or not isinstance(last, str):
            return None  # a null or non-text document id: left to the caller's sort
        bounds.append((first, last, i))
    bounds.sort()
    if any(last >= first for (_, last, _), (first, _, _) in itertools.pairwise(bounds)):
        return None
    return [tables[i] for _, _, i in bounds]
