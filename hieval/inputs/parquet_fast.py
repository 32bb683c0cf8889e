"""Normalisation of the common case over integer ranks: an unscored long-format Parquet file.

Why: nearly every label file an evaluation meets is already clean — Parquet, ``doc_id, code``,
canonical codes, a few thousand distinct codes over millions of rows. Normalising it in DuckDB
(:mod:`hieval.inputs.normalize`) materialises the trimmed file, sorts millions of strings and
reads the output back to find duplicates. Here the two columns are read dictionary-encoded
(each distinct value once, an integer per row) and every decision about values — trimming,
reading codes as the code system does, codes the hierarchy lacks, documents the gold lacks —
is taken on the dictionaries. Rows become one int64 key, ``doc rank << 24 | code rank``,
whose sort is the output's order and puts duplicates side by side; the strings are written back
from the sorted dictionaries.

Whatever is out of the ordinary — a score or ``code_type`` column, values with surrounding
whitespace or empty, a code the code system refuses, a null, nothing left to write — returns
None, and the general path reads the file with its row-level messages. Both paths write the
same rows and the same record (``tests/test_parquet_fast.py`` compares them).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hieval.atomic import atomic_path
from hieval.codesystem import CodeSystem
from hieval.errors import CodeError, preview_value
from hieval.inputs import handoff
from hieval.inputs.detect import LabelFile
from hieval.inputs.job import LabelJob
from hieval.inputs.options import COUNT, LENIENT
from hieval.inputs.policies import check_unknown_codes, check_unknown_docs
from hieval.inputs.record import UNSCORED_SELECTION, InputRecord
from hieval.pending_file import PendingFile

log = logging.getLogger(__name__)

RANK_BITS = 24  # a key's code rank: up to ~16.7M distinct codes (a few thousand in practice)
_RANK_MASK = (1 << RANK_BITS) - 1
# Rows decoded back to strings and written at once, one row group each: small enough that a
# row group's distinct documents fit Parquet's dictionary page (readers then get integers).
ROWS_PER_WRITE = 1 << 17
# Keys worked on at once where a whole-array temporary would double memory; small enough that
# the temporaries stay in cache (100x gold: 0.48 s against 0.53 s with 2^22).
_SLICE = 1 << 18
BASE_BYTES, BYTES_PER_ROW = 400 * 2**20, 40  # the memory plan (see planned_bytes)
SELECTION = UNSCORED_SELECTION  # the general path's words for unscored predictions
_SCORE_COLUMNS = (("doc_id", pa.string()), ("code", pa.string()), ("score", pa.float64()))
_EMPTY_SCORES = pa.schema([pa.field(name, kind, nullable=False) for name, kind in _SCORE_COLUMNS])


def normalize(source: LabelFile, job: LabelJob) -> InputRecord | None:
    """Normalise ``source`` to ``job.out`` as :func:`hieval.inputs.normalize.normalize_labels`
    does, when it is the common case; None (nothing written) otherwise. ``job.unknown_codes``
    is the resolved policy. Policy errors (unknown codes or documents refused) are raised as the
    general path raises them. ``job.on_fast_path`` is called once the file is known to be the
    common case (read and checked, before the sort and the write): what runs beside this one
    may then start; ``job.wait_turn`` (when given) is called there too, before the sort.

    The file's indices and keys are held in memory (:func:`planned_bytes`): with a
    ``job.memory_budget`` (a user's ``engine.memory_limit``) that the plan exceeds, the file is
    left to the general path, whose DuckDB spills to disk instead.

    The file's sha256 (its record's) is computed beside the read, in a thread of its own:
    hashing releases the interpreter's lock, and at 100x MIMIC-III it was 0.05-0.09 s of each
    file's normalisation, on the run's critical path."""
    if not _may_take(source, job):
        return None
    hashing = threading.Thread(target=_hash, args=(source,), name="sha256")
    hashing.start()
    try:
        return _normalize(source, job, hashing)
    finally:
        hashing.join()  # whichever way it ends: no thread is left reading the file


def _hash(source: LabelFile) -> None:
    """``source.sha256``, computed (and kept by the file); a failure is left to whoever asks
    for it next (the record), to be reported there, not printed from this thread."""
    with contextlib.suppress(Exception):
        source.sha256  # noqa: B018 (a cached property: computed once, kept)


def _normalize(source: LabelFile, job: LabelJob, hashing: threading.Thread) -> InputRecord | None:
    """:func:`normalize` once the file may take this path; ``hashing``: the thread computing
    ``source.sha256``, joined before the record takes it."""
    read = _read(source.path, is_gold=job.is_gold)
    if read is None:
        return None
    doc_index, doc_values, code_index, code_values = read
    rows = doc_index.size
    if rows == 0 or not (_clean(doc_values) and _clean(code_values)):
        return None
    coded = _rank_codes(code_index, code_values, job)
    if coded is None:
        return None
    hashing.join()
    record = InputRecord(
        name=source.name,
        path=str(source.path),
        sha256=source.sha256,
        format="long",
        rows=rows,
        code_format=coded.code_format,
        unknown_code_policy=job.unknown_codes,
        code_system=job.system.name,
        selection="" if job.is_gold else SELECTION,
    )
    drop_code = _unknown_codes(coded, record, source, job)
    if job.on_fast_path is not None:
        job.on_fast_path()
    if job.wait_turn is not None:  # read and checked; the sort and the write wait their turn
        job.wait_turn()
    docs, doc_rank = _ranks(doc_values)
    keys = _sorted_keys(doc_index, doc_rank, coded.index, coded.rank)
    del doc_index, code_index
    keys = _distinct(keys, record, docs, coded.codes, source.name)
    dropping = bool(drop_code.any())
    if dropping:
        keys = keys[~drop_code[keys & _RANK_MASK]]
    return _finish(keys, docs, coded.codes, record, source, job, every_code_used=not dropping)


def _may_take(source: LabelFile, job: LabelJob) -> bool:
    """Whether the file may be the common case at all, from its name, options, format and
    size: a long Parquet file without side lists, whose plan fits the memory budget."""
    options = job.options
    if source.path.suffix.lower() != ".parquet" or options.format not in ("auto", "long"):
        return False
    if COUNT in (job.unknown_codes, job.malformed_codes) or options.code_format == LENIENT:
        return False  # a generative coder's codes: kept, counted and recorded by the general path
    if options.code_list or options.doc_list:
        return False  # lists belong to dense matrices: the general path refuses them here
    if not source.path.is_file():
        return False  # the general path says what is wrong with it
    if source.format != "long":
        return False  # read as a wide table, as format detection says
    return job.memory_budget is None or planned_bytes(source.path) <= job.memory_budget


@dataclass(frozen=True)
class _Codes:
    """The file's codes read as the code system reads them: ``codes`` (sorted, distinct,
    canonical), the rank in it of each dictionary entry (``rank``, -1 for entries no row
    uses), the rows' dictionary ``index``, each used entry's ``canonical`` code and row count,
    and the code format they were read in."""

    codes: list[str]
    rank: np.ndarray
    index: np.ndarray
    canonical: pl.Series
    rows: np.ndarray
    code_format: str


def _rank_codes(code_index: np.ndarray, code_values: pa.Array, job: LabelJob) -> _Codes | None:
    """Read the used dictionary entries as codes; None when one is refused (the general path
    names its rows) or there are more distinct codes than a key holds. Vectorised over the
    entries (the Evaluator reads a few thousand of them in every batch)."""
    code_rows = np.bincount(code_index, minlength=len(code_values))
    used = np.flatnonzero(code_rows)
    raw = pl.Series("raw", code_values.take(_arrow(used)), dtype=pl.String)
    fmt = job.options.code_format
    if fmt == "auto":
        fmt = "dotted" if raw.str.contains(".", literal=True).any() else "undotted"
    try:
        canonical = _canonical(job.system, raw, fmt, job.options.code_type)
    except CodeError:
        return None  # the general path names the rows of bad codes
    codes = canonical.unique().sort()  # Polars orders text by its UTF-8 bytes, as sorted() does
    if codes.len() > _RANK_MASK:
        return None
    code_rank = np.full(len(code_values), -1, dtype=np.int64)
    code_rank[used] = codes.search_sorted(canonical).to_numpy()
    return _Codes(codes.to_list(), code_rank, code_index, canonical, code_rows[used], fmt)


def _unknown_codes(
    coded: _Codes, record: InputRecord, source: LabelFile, job: LabelJob
) -> np.ndarray:
    """Record the codes the hierarchy lacks and apply the policy to them (an error is the
    general path's); the codes to drop, as a mask over the ranks."""
    lacking = ~coded.canonical.is_in(job.hierarchy.frame["code"].implode())
    unknown: dict[str, int] = {}
    if lacking.any():
        found = pl.DataFrame({"code": coded.canonical, "rows": coded.rows}).filter(lacking)
        for code, n in found.group_by("code").agg(pl.col("rows").sum()).iter_rows():
            unknown[code] = int(n)
    record.unknown_codes = dict(sorted(unknown.items()))
    check_unknown_codes(
        unknown,
        hierarchy=job.hierarchy,
        policy=job.unknown_codes,
        path=source.path,
        name=source.name,
    )
    drop_code = np.zeros(len(coded.codes), dtype=bool)
    if unknown and job.unknown_codes == "drop":
        rank_of = {code: rank for rank, code in enumerate(coded.codes)}
        drop_code[[rank_of[code] for code in unknown]] = True
    return drop_code


def _distinct(
    keys: np.ndarray, record: InputRecord, docs: pa.Array, codes: list[str], name: str
) -> np.ndarray:
    """The sorted keys with repeats removed, counted in the record and logged with an
    example."""
    rows = keys.size
    distinct = np.concatenate(([True], keys[1:] != keys[:-1]))
    record.duplicates_removed = rows - int(np.count_nonzero(distinct))
    if not record.duplicates_removed:
        return keys
    first = int(keys[np.argmin(distinct)])  # the first False: the smallest repeated pair
    log.info(
        "%s: %d duplicate (doc_id, code) rows counted once, e.g. document %s code %s",
        name,
        record.duplicates_removed,
        preview_value(docs[first >> RANK_BITS].as_py()),
        preview_value(codes[first & _RANK_MASK]),
    )
    return keys[distinct]


def _finish(
    keys: np.ndarray,
    docs: pa.Array,
    codes: list[str],
    record: InputRecord,
    source: LabelFile,
    job: LabelJob,
    *,
    every_code_used: bool = False,
) -> InputRecord | None:
    """Apply the unknown-document policy, write the keys (and an empty scores file) and
    complete the record; None when nothing is left to write. ``every_code_used``: each of
    ``codes`` has a key (as read, none dropped): unless documents are dropped here, the kept
    table's code ranks are then all of them, and the encoder need not find them."""
    gold_docs, policy = job.gold_docs, job.unknown_docs
    path, name = source.path, source.name
    # Refused rather than dropped, unknown documents leave the rows as they are: while the gold
    # is still being written (hieval.pending_file), the file is written first and checked after.
    check_after = policy != "drop" and isinstance(gold_docs, PendingFile)
    check_after = check_after and not gold_docs.ready()
    if gold_docs is not None and not check_after:
        extra, outside = _outside_gold(keys, docs, gold_docs)
        check_unknown_docs(extra, policy=policy, path=path, name=name)
        if extra:
            record.unknown_documents_dropped = len(extra)
            drop_doc = np.zeros(len(docs), dtype=bool)
            drop_doc[outside] = True
            keys = keys[~drop_doc[keys >> RANK_BITS]]
    if keys.size == 0:
        return None  # nothing to write: the general path says why, or writes the empty table
    record.labels = int(keys.size)
    present = _documents(keys)
    record.documents = int(present.size)
    code_values = pl.Series(codes, dtype=pl.String).to_arrow()
    with atomic_path(job.out) as tmp:
        _write(keys, docs, code_values, tmp, with_score=not job.is_gold)
        if check_after:  # kept only when no document is outside the gold
            extra, _ = _outside_gold(keys, docs, gold_docs)
            check_unknown_docs(extra, policy=policy, path=path, name=name)
    # The engine reads this file next: it may take the keys from memory instead.
    every_code_used = every_code_used and not record.unknown_documents_dropped
    used_codes = np.arange(len(codes)) if every_code_used else None
    kept = handoff.KeptLabels(
        keys, pl.Series(docs), pl.Series(code_values), RANK_BITS, present, used_codes
    )
    handoff.keep(job.out, kept)
    if job.scores_out is not None:  # no scores: an empty table, typed as the general path's
        with atomic_path(job.scores_out) as tmp, pq.ParquetWriter(tmp, _EMPTY_SCORES):
            pass
    log.info("%s", record.summary())
    return record


#: Canonical forms of raw codes already parsed (``raw, canonical``), per code system, format
#: and default kind.
_PARSED: dict[tuple, pl.DataFrame] = {}
_PARSED_MAX = 1 << 20


def _canonical(
    system: CodeSystem, raw: pl.Series, code_format: str, code_type: str | None
) -> pl.Series:
    """The raw codes' canonical forms, each parsed once per process: the Evaluator's batches,
    and a notebook's repeated evaluations, read the same few thousand codes again and again
    (a refused code raises every time; errors are not kept). ``raw`` holds distinct codes."""
    key = (system, code_format, code_type)
    parsed = _PARSED.get(key)
    if parsed is None or parsed.height > _PARSED_MAX:
        parsed = pl.DataFrame(schema={"raw": pl.String, "canonical": pl.String})
    missing = raw.filter(~raw.is_in(parsed["raw"].implode())).unique()
    if missing.len():
        found = [
            system.normalize(code, None, code_format, default_type=code_type)[0]
            for code in missing.to_list()
        ]
        new = pl.DataFrame({"raw": missing, "canonical": found}, schema=parsed.schema)
        parsed = pl.concat([parsed, new], rechunk=True)
    _PARSED[key] = parsed
    frame = raw.to_frame("raw").join(parsed, on="raw", how="left", maintain_order="left")
    return frame["canonical"]


def planned_bytes(path: Path) -> int:
    """The peak memory this path plans for ``path``: the process, then per row the two
    dictionary indices, the key, and the read's and the sort's temporaries (measured: 1.9 and
    2.3 GB for the 1000× gold and predictions, 54M rows each)."""
    try:
        rows = pq.read_metadata(path).num_rows
    except (OSError, pa.ArrowException):
        return 0  # unreadable: _read hands it over
    return BASE_BYTES + BYTES_PER_ROW * rows


def planned_together(paths: list[Path]) -> tuple[int, int] | None:
    """The plan (bytes, rows) for normalising ``paths`` at once in one process: one base, and
    each file's rows. None when one of them is not an unscored long Parquet file as this path
    reads it (its reading, and so its memory, is then not known beforehand)."""
    rows = 0
    for path in paths:
        if path.suffix.lower() != ".parquet" or not path.is_file():
            return None
        try:
            metadata = pq.read_metadata(path)
        except (OSError, pa.ArrowException):
            return None
        names = metadata.schema.names
        if (
            "doc_id" not in names
            or "code" not in names
            or {"score", "code_type"} & {n.lower() for n in names}
        ):
            return None
        rows += metadata.num_rows
    return BASE_BYTES + BYTES_PER_ROW * rows, rows


def _read(path: Path, *, is_gold: bool) -> tuple[np.ndarray, pa.Array, np.ndarray, pa.Array] | None:
    """Row indices into, and the values of, the ``doc_id`` and ``code`` dictionaries; None
    when the file is not plain ``doc_id, code`` (exact names, text codes, text or integer
    documents, no nulls, no score column for predictions, no ``code_type``)."""
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException):
        return None
    names = [n.lower() for n in schema.names]
    if len(set(names)) != len(names) or "code_type" in names or (not is_gold and "score" in names):
        return None
    if "doc_id" not in schema.names or "code" not in schema.names:
        return None
    doc_type, code_type = schema.field("doc_id").type, schema.field("code").type
    if not (_is_text(code_type) and (_is_text(doc_type) or pa.types.is_integer(doc_type))):
        return None
    as_dictionary = [c for c, t in (("doc_id", doc_type), ("code", code_type)) if _is_text(t)]
    try:
        table = pq.ParquetFile(path, read_dictionary=as_dictionary).read(columns=["doc_id", "code"])
        table = table.unify_dictionaries()
    except (OSError, pa.ArrowException):
        return None
    result = []
    for column in ("doc_id", "code"):
        values = table[column]
        if values.null_count:
            return None
        runs = _sorted_runs(values) if pa.types.is_integer(values.type) else None
        indices, dictionary = runs if runs is not None else _dictionary_encoded(values)
        if not pa.types.is_string(dictionary.type):
            dictionary = dictionary.cast(pa.string())  # integer documents: text, as SQL casts
        try:  # text that is not UTF-8: the general path words the reader's refusal
            dictionary.validate(full=True)
        except pa.ArrowInvalid:
            return None
        result += [indices, dictionary]
    del table
    return result[0], result[1], result[2], result[3]


def _dictionary_encoded(values: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Each row's index into the column's distinct values, and those values (in order of
    first appearance, one dictionary for all chunks)."""
    if not pa.types.is_dictionary(values.type):
        values = values.dictionary_encode()
    indices = np.empty(len(values), dtype=np.int32)
    at = 0
    for chunk in values.chunks:  # copied chunk by chunk: no combined copy of the column
        indices[at : at + len(chunk)] = _numpy(chunk.indices)
        at += len(chunk)
    dictionary = values.chunk(0).dictionary if values.num_chunks else pa.nulls(0, pa.string())
    return indices, dictionary


def _sorted_runs(values: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array] | None:
    """:func:`_dictionary_encoded` of an integer column sorted in ascending order (a file
    written document by document, as hieval and most exports write them), from its runs of
    equal values: the same indices and values (first appearance is ascending order), in one
    pass instead of hashing every row (100x gold: 0.02 s against 0.1 s); None when the column
    is not sorted."""
    numbers = pl.Series(values).to_numpy()
    if numbers.size == 0 or not bool((numbers[1:] >= numbers[:-1]).all()):
        return None
    new = np.empty(numbers.size, dtype=bool)
    new[0] = True
    np.not_equal(numbers[1:], numbers[:-1], out=new[1:])
    indices = np.cumsum(new, dtype=np.int32)
    indices -= 1
    return indices, pl.Series(numbers[new]).to_arrow()


def _numpy(values: pa.Array) -> np.ndarray:
    """An Arrow array of numbers or booleans as numpy, through Polars: pyarrow's own
    ``to_numpy`` and ``pa.array`` import pandas where it is installed (a quarter second)."""
    return pl.Series(values).to_numpy()


def _arrow(values: np.ndarray) -> pa.Array:
    """Positions for ``take`` as an Arrow array (see :func:`_numpy` for why through Polars)."""
    return pl.Series(values).to_arrow()


def _is_text(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _clean(values: pa.Array) -> bool:
    """No value is empty or has surrounding whitespace (such files take the general path,
    which trims, and names the rows of empty values)."""
    if values.null_count:
        return False
    if len(values) == 0:
        return True
    trimmed = pc.utf8_trim_whitespace(values)
    return (
        bool(pc.all(pc.equal(trimmed, values)).as_py())
        and pc.min(pc.utf8_length(values)).as_py() > 0
    )


def _ranks(values: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The distinct values sorted (bytewise, as SQL orders text) and each value's rank."""
    order = pc.sort_indices(values)
    ordered = values.take(order)
    step = np.ones(len(values), dtype=np.int64)
    if len(values) > 1:
        step[1:] = _numpy(pc.not_equal(ordered[1:], ordered[:-1]))
    step[0] = 0
    rank_sorted = np.cumsum(step)
    rank = np.empty(len(values), dtype=np.int64)
    rank[_numpy(order)] = rank_sorted
    distinct = ordered.filter(pl.Series(np.concatenate(([True], step[1:] > 0))).to_arrow())
    return distinct, rank


def _sorted_keys(
    doc_index: np.ndarray, doc_rank: np.ndarray, code_index: np.ndarray, code_rank: np.ndarray
) -> np.ndarray:
    """``doc rank << RANK_BITS | code rank`` per row, sorted (built in slices: no full-size
    temporaries besides the keys)."""
    keys = np.empty(doc_index.size, dtype=np.int64)
    codes = np.empty(min(keys.size, _SLICE), dtype=np.int64)
    for start in range(0, keys.size, _SLICE):
        part = keys[start : start + _SLICE]
        np.take(doc_rank, doc_index[start : start + _SLICE], out=part)
        part <<= RANK_BITS
        code = codes[: part.size]
        np.take(code_rank, code_index[start : start + _SLICE], out=code)
        part |= code
    keys.sort()
    return keys


def _documents(keys: np.ndarray) -> np.ndarray:
    """The distinct document ranks of sorted keys (read in slices: no full-size temporaries)."""
    found, last = [], -1
    doc = np.empty(min(keys.size, _SLICE), dtype=np.int64)  # one buffer for every slice
    new = np.empty(doc.size, dtype=bool)
    for start in range(0, keys.size, _SLICE):
        part = keys[start : start + _SLICE]
        np.right_shift(part, RANK_BITS, out=doc[: part.size])
        new[0] = doc[0] != last
        np.not_equal(doc[1 : part.size], doc[: part.size - 1], out=new[1 : part.size])
        found.append(doc[: part.size][new[: part.size]])
        last = int(doc[part.size - 1])
    return np.concatenate(found) if found else keys[:0]


def _outside_gold(
    keys: np.ndarray, docs: pa.Array, gold_docs: str | Path
) -> tuple[list[str], np.ndarray]:
    """The documents of ``keys`` the normalised gold lacks: their names (sorted) and ranks."""
    present = _documents(keys)
    names = pl.Series(docs.take(_arrow(present)), dtype=pl.String)
    gold = handoff.distinct_values(gold_docs, "doc_id")  # sorted when kept
    if names.len() == gold.len() and names.equals(gold):  # the gold's documents, all of them
        return [], present[:0]
    outside = present[~names.is_in(gold.implode()).to_numpy()]
    return docs.take(_arrow(outside)).to_pylist(), outside


_TEXT = pa.dictionary(pa.int32(), pa.string())


def _schema(*, with_score: bool) -> pa.Schema:
    """The normalised file's columns as written: text from dictionaries (read back as plain
    text: the Arrow schema is not stored)."""
    fields = [pa.field("doc_id", _TEXT, nullable=False), pa.field("code", _TEXT, nullable=False)]
    if with_score:
        fields.append(pa.field("score", pa.float64()))
    return pa.schema(fields)


def _write(keys: np.ndarray, docs: pa.Array, codes: pa.Array, out: str | Path, *, with_score: bool):
    """The sorted keys as hieval's normalised Parquet at ``out`` (a temporary path the caller
    renames when all is well), one row group per slice.

    Each row group is handed to the writer as dictionary arrays holding exactly the documents
    and codes of its rows, so the writer copies them to the dictionary page instead of hashing
    a string per row, and readers that take a file's values from its dictionaries (the
    encoder, :func:`hieval.inputs.handoff.distinct_values`) find only values that occur.
    Statistics are kept for ``doc_id`` only: the rows are sorted by it, so its ranges prune
    row groups; every row group holds most codes, so code ranges prune nothing, and computing
    them on strings was half of the write."""
    schema = _schema(with_score=with_score)
    with pq.ParquetWriter(
        out, schema, compression="zstd", store_schema=False, write_statistics=["doc_id"]
    ) as writer:
        for start in range(0, keys.size, ROWS_PER_WRITE):
            part = keys[start : start + ROWS_PER_WRITE]
            columns = [
                _dictionary_column(part >> RANK_BITS, docs, ordered=True),
                _dictionary_column(part & _RANK_MASK, codes, ordered=False),
            ]
            if with_score:
                columns.append(pa.nulls(part.size, pa.float64()))
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))


def _dictionary_column(ranks: np.ndarray, values: pa.Array, *, ordered: bool) -> pa.Array:
    """``values[ranks]`` as a dictionary array whose dictionary holds only the values used, in
    rank order (``ordered``: the ranks are sorted, so each value's rows are one run)."""
    if ordered:
        new = np.empty(ranks.size, dtype=bool)
        new[0] = True
        np.not_equal(ranks[1:], ranks[:-1], out=new[1:])
        indices = np.cumsum(new, dtype=np.int32) - 1
        used = ranks[new]
    else:
        present = np.bincount(ranks, minlength=len(values)) > 0
        indices = (np.cumsum(present, dtype=np.int32) - 1)[ranks]
        used = np.flatnonzero(present)
    return pa.DictionaryArray.from_arrays(_arrow(indices), values.take(_arrow(used)))
