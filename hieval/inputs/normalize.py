"""Read gold and prediction files in long format, validate them, and normalise their codes.

Every number hieval reports stands on this step, so it refuses what it cannot read exactly
(a numeric code column that lost its leading zeros, an ambiguous undotted code, a NaN score) and
reports what it changed (duplicates removed, codes unknown to the hierarchy, rows below the
threshold) in a small JSON record that travels with the normalised table.

Output: Parquet ``doc_id, code`` (both strings, sorted) for the gold, ``doc_id, code, score``
for predictions (the decisions, each with its score; null for hard predictions). A row with an
empty code declares a document with no labels: it is kept with a null code, so the document
still counts. Scored predictions also keep every score, selected or not (``scores_out``), for the
ranking metrics and threshold tuning: a threshold or top-k decides, it never destroys a score.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hieval import codesystem
from hieval.atomic import atomic_path
from hieval.codes.icd9 import CODE_TYPES
from hieval.codesystem import CodeSystem
from hieval.errors import CodeError, ConfigError, InputError, preview, preview_value
from hieval.hierarchy.table import LevelTable
from hieval.inputs import parquet_fast
from hieval.inputs.bad_scores import bad_score
from hieval.inputs.counted import INVALID, UNKNOWN, mark_counted
from hieval.inputs.detect import MIMIC4_FORMATS, LabelFile
from hieval.inputs.formats import (
    FORMATS,
    GOLD,
    PREDICTIONS,
    Extras,
    caml,
    check_file,
    dense,
    locate,
    mimic4,
    open_source,
    read_error,
)
from hieval.inputs.formats.repeats import check_cell_repeats
from hieval.inputs.job import LabelJob
from hieval.inputs.options import (
    CODE_FORMATS,
    COUNT,
    DEFAULT_MALFORMED_CODES,
    DEFAULT_THRESHOLD,
    DEFAULT_UNKNOWN_CODES,
    DEFAULT_UNKNOWN_DOCS,
    LENIENT,
    MALFORMED_CODE_POLICIES,
    UNKNOWN_CODE_POLICIES,
    LabelOptions,
    TunedThresholds,
    check_threshold,
)
from hieval.inputs.policies import check_unknown_codes, check_unknown_docs, gold_of
from hieval.inputs.record import UNSCORED_SELECTION, InputRecord
from hieval.paths import duckdb_path

log = logging.getLogger(__name__)

ROLES = (GOLD, PREDICTIONS)


def _check_columns(path: Path, name: str, names: list[str], types) -> None:
    """``doc_id`` and ``code`` are there (in any case), and codes are text. The columns a
    message lists are the file's own, as written (not the readers' ``_line``)."""
    columns = [c.lower() for c in names]
    missing = [c for c in ("doc_id", "code") if c not in columns]
    if missing:
        found = [c for c in names if c != "_line"]
        hint = ""
        if {"hadm_id", "icd_code"} <= {c.lower() for c in found}:
            hint = (
                f"; it looks like a MIMIC-IV table without its '{mimic4.REQUIRED[-1]}' column: "
                "add that column (format mimic4_icd9 or mimic4_icd10), or rename hadm_id and "
                "icd_code to doc_id and code"
            )
        raise InputError(
            f"{name}: {path} lacks column(s) {missing}; long format needs 'doc_id,code[,score]' "
            f"(found {preview(found, 20)}){hint}"
        )
    code_type = str(types[columns.index("code")])
    if code_type != "VARCHAR":
        integers = code_type in _INTEGER_TYPES
        raise InputError(
            f"{name}: column 'code' in {path} is {code_type}, not text; codes must be stored as "
            "strings because leading zeros matter (001.0 is not 1.0)"
            + (f"; whole numbers may be label indices: {caml.INDEX_HINT}" if integers else "")
        )


_INTEGER_TYPES = {
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
    "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT",
}  # fmt: skip


def _map_codes(
    raw: pl.DataFrame,
    fmt: str,
    job: LabelJob,
    *,
    where,
    path: Path,
    name: str,
    rows,
    lenient: bool = False,
) -> pl.DataFrame:
    """Normalise each distinct (raw code, code_type) once, as the code system reads codes;
    fail with examples on bad codes (and say so when they look like the other ICD system); a
    file of label indices instead of codes gets one line saying so (:func:`caml.label_indices`).

    A file holds a few thousand distinct codes however many rows it has, so this loop is
    milliseconds; the rows are mapped by one join (:func:`_apply_mapping`). ``rows()`` gives
    each (code, code_type) its first row, and ``where`` maps rows to their place in the file:
    both are asked only when there are bad codes to show.

    The job gives the code system, the file's ``code_type`` and ``malformed_codes``.
    ``lenient`` reads the code before a description (:func:`lenient_code`); ``malformed_codes:
    count`` keeps a string that is no code as it is written, its kind ``invalid``
    (:data:`INVALID_KIND`), instead of refusing the file.
    """
    system, default_type, malformed = job.system, job.options.code_type, job.malformed_codes
    mapped, errors = [], []
    for code, ctype in raw.iter_rows():
        try:
            text = lenient_code(code) if lenient else code
            canonical, kind = system.normalize(text, ctype, fmt, default_type=default_type)
            mapped.append((code, ctype, canonical, kind))
        except CodeError as exc:
            if malformed == COUNT:
                mapped.append((code, ctype, code, INVALID_KIND))
            else:
                errors.append((code, ctype, str(exc)))
    if errors:
        first = {(code, ctype): row for code, ctype, row in rows().iter_rows()}
        shown_errors = [(first[code, ctype], code, msg) for code, ctype, msg in errors[:10]]
        places = where(row for row, _code, _msg in shown_errors)
        indices = caml.label_indices(raw["code"])
        if indices is not None:
            row, code, _msg = shown_errors[0]
            raise InputError(
                f"{name}: {path}: its {raw['code'].n_unique()} distinct codes are all whole "
                f"numbers, {indices[0]} to {indices[1]} (e.g. "
                f"{places[row].removeprefix(f'{path}, ')}: {preview_value(code)}), as label "
                f"indices are; {caml.INDEX_HINT}"
            )
        shown = [f"{places[row]}: {msg}" for row, _code, msg in shown_errors]
        hint = ""
        if mismatch := system.mismatch_hint([code for code, _type, _msg in errors[:50]]):
            hint = f"\n  {mismatch}"
        raise InputError(
            f"{name}: {len(errors)} bad code(s) in {path}:\n  "
            + "\n  ".join(shown)
            + ("\n  ..." if len(errors) > 10 else "")
            + hint
        )
    return pl.DataFrame(
        mapped, schema=dict.fromkeys(["raw", "raw_type", "code", "kind"], pl.String), orient="row"
    )


#: The kind of a prediction kept under ``malformed_codes: count`` though it is no code.
INVALID_KIND = "invalid"

#: A code, then a description: ``401.9 - Unspecified ...``, ``I10 (Essential ...)``,
#: ``I10: Essential ...``. The code is the first word; what follows must start with a dash, a
#: parenthesis or a colon, so that a bare word (``hypertension``) stays what it is.
_LENIENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9.]*)\s*(?:[-\u2013\u2014:(\[]|\s)(?:.*)$", re.S)


def lenient_code(raw: str) -> str:
    """The code of ``raw`` read leniently (``code_format: lenient``, predictions only): the
    first word of a code written with a description after it; ``raw`` itself otherwise (then
    read, and refused or counted, as any code)."""
    match = _LENIENT.match(raw)
    return match.group(1).rstrip(".") if match else raw


def _apply_mapping(con, mapping: pl.DataFrame, *, has_type: bool) -> bool:
    """Replace the raw codes of ``labels`` by their canonical codes.

    A file already written in canonical codes (the usual dotted file) needs nothing; a mapping
    that sends no two raw codes to one code is a join; otherwise (several spellings or code
    types of one code) the rows are grouped again, so each (doc_id, code[, score]) is one
    row with the sum of its copies: then True is returned.
    """
    if not has_type and mapping["raw"].equals(mapping["code"]):
        return False
    _register(con, "mapping", mapping)
    join = """FROM labels l LEFT JOIN mapping m
              ON l.code = m.raw AND l.code_type IS NOT DISTINCT FROM m.raw_type"""
    if not has_type and mapping["code"].n_unique() == mapping.height:
        _replace_labels(
            con, f"SELECT l.doc_id, m.code, l.code_type, l.score, l.n, l.bad_scores {join}"
        )
        grouped = False
    else:
        _replace_labels(
            con,
            f"""SELECT l.doc_id, m.code, NULL::VARCHAR AS code_type, l.score, sum(l.n) AS n,
                       0 AS bad_scores
                {join} GROUP BY l.doc_id, m.code, l.score""",
        )
        grouped = True
    con.unregister("mapping")
    return grouped


def _legacy_rows(con, columns: list[str], *, has_score: bool, has_type: bool) -> None:
    """The file's rows with their row number, as table ``raw``: read again only when a message
    must name the row of a bad value (valid files never pay for it)."""
    con.execute(f"""
        CREATE TEMP TABLE IF NOT EXISTS raw AS
        SELECT {"_line" if "_line" in columns else "row_number() OVER ()"} AS row,
               trim(CAST(doc_id AS VARCHAR)) AS doc_id,
               nullif(trim(code), '') AS code,
               {"nullif(lower(trim(CAST(code_type AS VARCHAR))), '')" if has_type else "NULL"}
                   AS code_type,
               {"CAST(score AS VARCHAR)" if has_score else "NULL"} AS score_raw,
               {"TRY_CAST(score AS DOUBLE)" if has_score else "NULL::DOUBLE"} AS score
        FROM src""")


def _raise_bad_row(con, name: str, where_one, *, has_score: bool, has_type: bool) -> None:
    """Raise the message for the first bad row of ``raw``: an empty doc_id, a code_type that
    is not dx or proc, or a score that is not a finite number (checked in that order)."""
    bad_doc = con.execute(
        "SELECT row FROM raw WHERE doc_id IS NULL OR doc_id = '' ORDER BY row LIMIT 1"
    ).fetchone()
    if bad_doc:
        raise InputError(f"{name}: {where_one(bad_doc[0])}: empty doc_id")
    if has_type:
        bad_type = con.execute(
            "SELECT row, code_type FROM raw WHERE code_type NOT IN ('dx', 'proc') "
            "ORDER BY row LIMIT 1"
        ).fetchone()
        if bad_type:
            raise InputError(
                f"{name}: {where_one(bad_type[0])}: code_type {preview_value(bad_type[1])} must "
                "be dx or proc"
            )
    if has_score:
        bad = con.execute("""
            SELECT row, score_raw, doc_id, code FROM raw
            WHERE code IS NOT NULL AND (score IS NULL OR isnan(score) OR isinf(score))
            ORDER BY row, code LIMIT 1""").fetchone()
        if bad:
            row, score, doc, code = bad
            raise bad_score(name, where_one(row), score=score, doc=doc, code=code)
    raise AssertionError(f"{name}: a bad row was counted but not found again")


def placed_ancestors(codes: Iterable[str], table: LevelTable) -> pl.DataFrame:
    """Ancestor rows for codes missing from the hierarchy, placed where their syntax says, as
    the table's code system places them (ICD-9: e1/e0 from the code, c/chapter from the range
    table; ICD-10: by prefixes). A user's own tree (``verbatim``) has no syntax: refused."""
    return codesystem.of_table(table).placed_ancestors(set(codes), table)


def normalize_labels(  # noqa: PLR0913 (its callers' keywords; checked into one LabelJob)
    path: str | Path,
    *,
    name: str,
    role: str,
    out: str | Path,
    hierarchy: LevelTable,
    options: LabelOptions | None = None,
    unknown_codes: str | None = DEFAULT_UNKNOWN_CODES,
    malformed_codes: str = DEFAULT_MALFORMED_CODES,
    gold_docs: str | Path | None = None,
    unknown_docs: str = DEFAULT_UNKNOWN_DOCS,
    default_threshold: float = DEFAULT_THRESHOLD,
    duckdb_config: dict | None = None,
    scores_out: str | Path | None = None,
    tuned: TunedThresholds | None = None,
    memory_budget: int | None = None,
    on_fast_path: Callable[[], None] | None = None,
    wait_turn: Callable[[], None] | None = None,
) -> InputRecord:
    """Normalise one label file to ``out`` and return what was done.

    ``role`` is ``gold`` or ``predictions``. Predictions are checked against ``gold_docs`` (the
    normalised gold), when given: documents absent from it are an error or dropped
    (``unknown_docs``). Scores select predictions by ``threshold`` (default
    ``default_threshold``) and/or ``top_k`` per document; both given means both must hold.

    ``scores_out`` (predictions only) receives every score, ``doc_id, code, score``, before
    any threshold or top-k (empty for hard predictions); ``tuned`` replaces the threshold by
    thresholds tuned on a validation set.

    ``duckdb_config`` bounds the engine (``memory_limit``, ``temp_directory``): the work and
    the output stay in DuckDB, which spills beyond the limit, and the result is written by
    DuckDB straight to Parquet. A clean Parquet file is normalised over integer ranks in
    memory instead (:mod:`hieval.inputs.parquet_fast`), unless its plan exceeds
    ``memory_budget`` (the user's memory limit, in bytes; None: no limit was set).
    ``on_fast_path`` is called when the file is found to be that case (what runs beside this
    one may then start: :mod:`hieval.pending_file`); a ``gold_docs`` still being written is
    waited for before a file is read in DuckDB, so DuckDB never works beside another file.
    ``wait_turn``, when given, is called once the file has been read and checked on the fast
    path (before its sort), or before any other way of reading it: this file's reading may
    then overlap another's, and its memory-heavy work waits (:func:`hieval.run` passes the
    predictions the gold's decision).

    Codes are read as the hierarchy's code system reads them (:mod:`hieval.codesystem`);
    ``unknown_codes`` None is that system's default. ``unknown_codes: count`` and
    ``malformed_codes: count`` keep a prediction the release lacks, or that is no code at all,
    as a code placed nowhere (a false positive at the leaf level only); the normalised file lists
    them in its metadata (:mod:`hieval.inputs.counted`) so that nothing downstream places them.
    The gold stays strict: for it ``count`` means the system's default and a malformed code is
    an error.

    The file is looked at once (:class:`~hieval.inputs.detect.LabelFile`: its format and
    sha256) and the settings are checked once (:class:`~hieval.inputs.job.LabelJob`); both
    ways of normalising receive those two values.
    """
    options = options or LabelOptions()
    path = Path(path)
    system, unknown_codes = _check_settings(
        name=name, role=role, options=options, default_threshold=default_threshold,
        unknown_codes=unknown_codes, hierarchy=hierarchy,
    )  # fmt: skip
    if malformed_codes not in MALFORMED_CODE_POLICIES:
        raise InputError(
            f"malformed_codes must be one of {MALFORMED_CODE_POLICIES}, not {malformed_codes!r}"
        )
    job = LabelJob(
        role=role, out=out, hierarchy=hierarchy, system=system, options=options,
        unknown_codes=unknown_codes, gold_docs=gold_docs,
        malformed_codes=DEFAULT_MALFORMED_CODES if role == GOLD else malformed_codes,
        unknown_docs=unknown_docs, default_threshold=default_threshold, tuned=tuned,
        scores_out=scores_out, duckdb_config=duckdb_config, memory_budget=memory_budget,
        on_fast_path=on_fast_path, wait_turn=wait_turn,
    )  # fmt: skip
    check_file(path, name)  # before any reader looks at it: one message for a path it cannot use
    source = LabelFile(path, name, options.format, system)
    common = parquet_fast.normalize(source, job)
    if common is not None:  # the usual clean file: normalised over integer ranks
        return common
    if wait_turn is not None:
        wait_turn()
    from hieval.inputs import dense_normalize  # here: it takes its steps from this module

    matrix = dense_normalize.blocked_matrix(source, job)
    if matrix is not None:  # a dense score matrix: decided by blocks, never made long
        return dense_normalize.normalize_dense(source, job, matrix)
    return _normalize_in_duckdb(source, job)


def _check_settings(
    *,
    name: str,
    role: str,
    options: LabelOptions,
    default_threshold: float,
    unknown_codes: str | None,
    hierarchy: LevelTable,
) -> tuple[CodeSystem, str]:
    """Refuse settings no file could be read with; the hierarchy's code system and the
    unknown-code policy (None: that system's default)."""
    if role not in ROLES:
        raise ConfigError(f"role must be one of {ROLES}, not {role!r}")
    check_threshold(default_threshold, "default_threshold")
    if unknown_codes not in (None, *UNKNOWN_CODE_POLICIES):
        raise InputError(
            f"unknown_codes must be one of {UNKNOWN_CODE_POLICIES}, not {unknown_codes!r}"
        )
    system = codesystem.of_table(hierarchy)
    if role == GOLD and unknown_codes == COUNT:  # the gold stays strict: its codes are the truth
        unknown_codes = None
    if role == GOLD and options.code_format == LENIENT:
        raise InputError(
            f"{name}: code_format lenient reads predictions only; the gold's codes must be "
            "written as codes (auto, dotted or undotted)"
        )
    try:
        unknown_codes = system.resolve_unknown_codes(unknown_codes)
    except CodeError as exc:
        raise InputError(f"{name}: {exc}") from None
    if options.code_format not in CODE_FORMATS:
        raise InputError(f"{name}: code_format must be one of {CODE_FORMATS}")
    if options.code_type not in (None, *CODE_TYPES):
        raise InputError(f"{name}: code_type must be dx or proc, not {options.code_type!r}")
    return system, unknown_codes


@dataclass(frozen=True)
class _Source:
    """A file opened in DuckDB as the view ``src``: the connection, the file, the format it
    is read as and its columns (lower case), and whether it has scores (predictions only)
    and a ``code_type`` column."""

    con: duckdb.DuckDBPyConnection
    file: LabelFile
    format: str
    columns: list[str]
    has_score: bool
    has_type: bool

    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def name(self) -> str:
        return self.file.name

    def where(self, rows) -> dict[int, str]:
        """Each row's place in the file, in the file's terms (looked up only for messages)."""
        return locate(self.path, self.format, self.name, rows)

    def where_one(self, row: int) -> str:
        return self.where([row])[row]

    def legacy_rows(self) -> None:
        _legacy_rows(self.con, self.columns, has_score=self.has_score, has_type=self.has_type)


def _register(con: duckdb.DuckDBPyConnection, name: str, frame: object) -> None:
    """Register ``frame`` as ``name``, first finishing the connection's open result: DuckDB 2
    refuses to register while one is open, and the single-row queries here read it with
    ``fetchone()``, which leaves it open (a wide table's scores under ``unknown_codes: drop``
    crashed so)."""
    with contextlib.suppress(duckdb.InvalidInputException):  # no open result
        con.fetchall()
    con.register(name, frame)


def _normalize_in_duckdb(file: LabelFile, job: LabelJob) -> InputRecord:
    """The general path: every format, every oddity, row-level messages, DuckDB's spilling."""
    if job.gold_docs is not None:  # a gold still being written: wait for it (see above)
        job = replace(job, gold_docs=Path(job.gold_docs))
    con = duckdb.connect(config=job.duckdb_config or {})
    src = _open(con, file, job)
    record = InputRecord(
        name=file.name,
        path=str(file.path),
        sha256=file.sha256,
        format=src.format,
        unknown_code_policy=job.unknown_codes,
        code_system=job.system.name,
        malformed_code_policy=job.malformed_codes,
    )
    if src.format in MIMIC4_FORMATS:
        record.other_version_rows = mimic4.other_version_rows(con, MIMIC4_FORMATS[src.format])
    empty = _read_labels(src, record, is_gold=job.is_gold)
    grouped = _read_codes(src, record, job)
    _select(src, record, job)
    if src.has_score or grouped:
        _count_duplicates(con, record, file.name)
    _apply_unknown_codes(con, record, job, file.path, file.name)
    if job.gold_docs is not None:
        _apply_unknown_docs(con, record, job.gold_docs, job.unknown_docs, file.path, file.name)
    _count_labels(src, record, is_gold=job.is_gold)
    _write_labels(src, record, job, empty=empty, grouped=grouped)
    if job.scores_out is not None:
        _write_scores(
            con,
            record,
            job.scores_out,
            has_score=src.has_score,
            known=job.hierarchy,
            gold_docs=job.gold_docs,
            name=file.name,
        )
    log.info("%s", record.summary())
    return record


def _open(con, file: LabelFile, job: LabelJob) -> _Source:
    """Register ``src`` for the file, read as its format, and check its columns."""
    options = job.options
    extras = Extras(code_list=options.code_list, doc_list=options.doc_list)
    file_format = open_source(con, file.path, file.name, job.role, fmt=file.format, extras=extras)
    try:
        src = con.sql("SELECT * FROM src LIMIT 0")
        columns = [c.lower() for c in src.columns]
    except duckdb.Error as exc:
        raise read_error(file.path, file_format, file.name, exc) from None
    _check_columns(file.path, file.name, src.columns, src.types)
    return _Source(
        con,
        file,
        file_format,
        columns,
        has_score="score" in columns and not job.is_gold,
        has_type="code_type" in columns,
    )


def _read_labels(src: _Source, record: InputRecord, *, is_gold: bool) -> int:
    """Read the file once into ``labels``, count its rows and refuse the first bad row;
    the number of rows without a code.

    Scored files are read as their distinct rows with their multiplicity ``n`` (the distinct
    (doc_id, code, score) keys keep all that the selection and counts need); unscored files
    row by row (n = 1), their duplicates found in the sorted output instead
    (:func:`_write_unscored`), which is far cheaper than grouping millions of rows that are
    nearly always distinct. A row's place in the file is looked up only when a message needs
    it (:func:`_legacy_rows`).
    """
    has_score, has_type = src.has_score, src.has_type
    type_expr = "nullif(lower(trim(CAST(code_type AS VARCHAR))), '')" if has_type else "NULL"
    score_expr = "TRY_CAST(score AS DOUBLE)" if has_score else "NULL::DOUBLE"
    bad_score = (
        "count(*) FILTER (code IS NOT NULL AND (score IS NULL OR isnan(score) OR isinf(score)))"
        if has_score
        else "0"
    )
    keys = "doc_id, code" + (", code_type" if has_type else "") + ", score"
    try:  # the file is read here, so its read errors (bad bytes, corrupt pages) surface here
        src.con.execute(f"""
            CREATE TEMP TABLE labels AS
            SELECT doc_id, code, {"code_type" if has_type else "NULL::VARCHAR AS code_type"},
                   {"score" if has_score else "NULL::DOUBLE AS score"},
                   {"count(*)" if has_score else "1"} AS n, {bad_score} AS bad_scores
            FROM (SELECT trim(CAST(doc_id AS VARCHAR)) AS doc_id,
                         nullif(trim(code), '') AS code,
                         {type_expr} AS code_type, {score_expr} AS score
                  FROM src)
            {f"GROUP BY {keys}" if has_score else ""}""")
        rows, bad_docs, bad_types, bad_scores, empty = src.con.execute(f"""
            SELECT coalesce(sum(n), 0)::BIGINT,
                   count(*) FILTER (doc_id IS NULL OR doc_id = ''),
                   {"count(*) FILTER (code_type NOT IN ('dx', 'proc'))" if has_type else "0"},
                   coalesce(sum(bad_scores), 0)::BIGINT,
                   count(*) FILTER (code IS NULL)
            FROM labels""").fetchall()[0]
    except duckdb.Error as exc:
        raise read_error(src.path, src.format, src.name, exc) from None
    record.rows = rows
    if record.rows == 0 and is_gold:
        raise InputError(f"{src.name}: {src.path} holds no rows; the gold needs labels")
    if bad_docs or bad_types or bad_scores:
        src.legacy_rows()
        _raise_bad_row(src.con, src.name, src.where_one, has_score=has_score, has_type=has_type)
    return empty


def _read_codes(src: _Source, record: InputRecord, job: LabelJob) -> bool:
    """Replace the raw codes by canonical ones (:func:`_map_codes`, :func:`_apply_mapping`)
    and refuse a code that repeats within one cell; whether the rows were grouped again."""
    con = src.con
    raw_codes = con.sql("""
        SELECT DISTINCT code, code_type FROM labels WHERE code IS NOT NULL
        ORDER BY code, code_type""").pl()
    fmt = job.options.code_format
    lenient = fmt == LENIENT
    if lenient:
        read = raw_codes["code"].map_elements(lenient_code, return_dtype=pl.String)
        record.codes_read_leniently = int((read != raw_codes["code"]).sum())
        fmt = "dotted" if read.str.contains(".", literal=True).any() else "undotted"
    elif fmt == "auto":
        fmt = "dotted" if raw_codes["code"].str.contains(".", literal=True).any() else "undotted"
    record.code_format = f"{LENIENT} {fmt}" if lenient else fmt

    def code_rows() -> pl.DataFrame:
        src.legacy_rows()
        return con.sql("""
            SELECT code, code_type, min(row) FROM raw WHERE code IS NOT NULL
            GROUP BY code, code_type ORDER BY code, code_type""").pl()

    code_where, first_rows = src.where, code_rows
    if src.format == "dense":  # codes are the code list's lines, not matrix rows

        def code_where(lines) -> dict[int, str]:
            return dense.code_places(con, lines)

        def first_rows() -> pl.DataFrame:
            return dense.code_rows(con)

    mapping = _map_codes(
        raw_codes,
        fmt,
        job,
        where=code_where,
        path=src.path,
        name=src.name,
        rows=first_rows,
        lenient=lenient,
    )
    record.invalid_codes = dict.fromkeys(
        mapping.filter(pl.col("kind") == INVALID_KIND)["code"].unique().sort().to_list(), 0
    )
    grouped = _apply_mapping(con, mapping, has_type=src.has_type)
    check_cell_repeats(
        con,
        mapping,
        FORMATS[src.format],
        role=job.role,
        has_score=src.has_score,
        path=src.path,
        name=src.name,
    )
    return grouped


def _select(src: _Source, record: InputRecord, job: LabelJob) -> None:
    """Keep every score aside for ``scores_out``, then select predictions by their scores
    (unscored predictions are all kept)."""
    if src.has_score and job.scores_out is not None:
        src.con.execute("""
            CREATE TEMP TABLE scored AS SELECT doc_id, code, max(score) AS score FROM labels
            WHERE code IS NOT NULL GROUP BY doc_id, code""")
    if src.has_score:
        _select_by_score(src.con, record, job.options, job.default_threshold, job.tuned)
    elif not job.is_gold:
        record.selection = UNSCORED_SELECTION


def _count_labels(src: _Source, record: InputRecord, *, is_gold: bool) -> None:
    """Count documents and labels (unscored files: in the sorted output, by
    :func:`_write_unscored`; here only whether there is a label); refuse a gold without
    labels, on which every count would be zero and every metric undefined."""
    con = src.con
    if src.has_score:
        record.documents, record.labels = con.execute("""
            SELECT count(DISTINCT doc_id), count(DISTINCT (doc_id, code)) FILTER (code IS NOT NULL)
            FROM labels""").fetchone()
    else:
        record.labels = con.execute(
            "SELECT count(*) FROM (SELECT 1 FROM labels WHERE code IS NOT NULL LIMIT 1)"
        ).fetchone()[0]
    if is_gold and record.labels == 0:
        record.documents = con.execute("SELECT count(DISTINCT doc_id) FROM labels").fetchone()[0]
        dropped = " once codes not in the hierarchy were dropped" if record.unknown_codes else ""
        raise InputError(
            f"{src.name}: the gold holds no labels: all {record.documents} document(s) in "
            f"{src.path} are empty{dropped}; a gold needs at least one code to evaluate against"
        )


def _write_labels(
    src: _Source, record: InputRecord, job: LabelJob, *, empty: int, grouped: bool
) -> None:
    """Write ``labels`` to ``job.out``, sorted.

    Predictions keep each decision's score (a duplicated pair its highest, as top-k ranks it).
    A document's empty-code row is kept only when it has no code; without such rows (the
    usual case) neither that filter nor (unscored) a grouping is needed.
    """
    keep = (
        "WHERE code IS NOT NULL OR doc_id NOT IN (SELECT doc_id FROM labels WHERE code IS NOT NULL)"
        if empty
        else ""
    )
    with atomic_path(job.out) as tmp:
        if src.has_score:
            select = f"SELECT doc_id, code, max(score) AS score FROM labels {keep} GROUP BY ALL"
            _copy_sorted(src.con, select, tmp)
        else:
            _write_unscored(
                src.con,
                record,
                tmp,
                keep=keep,
                is_gold=job.is_gold,
                name=src.name,
                check=not grouped,
            )
        if record.counted_codes:
            invalid = record.invalid_codes
            statuses = {c: INVALID if c in invalid else UNKNOWN for c in record.counted_codes}
            mark_counted(tmp, statuses)


def _copy_sorted(con, select: str, out: Path) -> None:
    """Write ``select``'s rows sorted by (doc_id, code), empty codes first, as hieval's
    normalised Parquet."""
    con.execute(f"""
        COPY ({select} ORDER BY doc_id, code NULLS FIRST)
        TO '{_sql_path(out)}' (FORMAT parquet, COMPRESSION zstd)""")


def _replace_labels(con, select: str) -> None:
    """Make ``labels`` the table of ``select`` (which may read the current ``labels``)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE labels AS {select}")


def _drop(con, condition: str, parameters: list | None = None) -> None:
    """Delete the rows of ``labels`` that meet ``condition``, keeping them in ``dropped``.

    A policy drops whole (doc_id, code) pairs (a code, or a document), so ``labels`` and
    ``dropped`` share no pair, and duplicates counted over both after the drops are those the
    file held before them (as :func:`_count_duplicates` counts them).
    """
    con.execute("CREATE TEMP TABLE IF NOT EXISTS dropped AS FROM labels LIMIT 0")
    con.execute(f"INSERT INTO dropped SELECT * FROM labels WHERE {condition}", parameters)
    con.execute(f"DELETE FROM labels WHERE {condition}", parameters)


def _has_dropped(con) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'dropped' AND temporary"
        ).fetchone()[0]
    )


def _count_duplicates(con, record: InputRecord, name: str, rows: str | None = None) -> None:
    """Count the (doc_id, code) rows of ``rows`` beyond the first (as ``duplicates_removed``;
    by default ``labels`` and the pairs a policy dropped) and log an example."""
    if rows is None:
        rows = "(FROM labels UNION ALL FROM dropped)" if _has_dropped(con) else "labels"
    record.duplicates_removed = con.execute(f"""
        SELECT coalesce(sum(n), 0)::BIGINT - count(DISTINCT (doc_id, code)) FROM {rows}
        WHERE code IS NOT NULL""").fetchone()[0]
    if record.duplicates_removed:
        example = con.execute(f"""
            SELECT doc_id, code FROM {rows} WHERE code IS NOT NULL
            GROUP BY ALL HAVING sum(n) > 1 ORDER BY ALL LIMIT 1""").fetchone()
        log.info(
            "%s: %d duplicate (doc_id, code) rows counted once, e.g. document %s code %s",
            name,
            record.duplicates_removed,
            *(preview_value(value) for value in example),
        )


def _scan_sorted(path: Path) -> tuple[bool, int, int]:
    """Whether a Parquet file sorted by (doc_id, code) has a row equal to the one before it;
    and its documents and labels (rows with a code), counted on the way.

    Read row group by row group as dictionary indices: with a dictionary of distinct strings,
    equal indices are equal strings, so the comparison is of integers and no string is decoded
    (a dictionary that is not distinct is compared as strings). Memory stays one row group.
    """
    columns = ["doc_id", "code"]
    parquet = pq.ParquetFile(path, read_dictionary=columns)
    last: tuple | None = None
    documents = labels = 0
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group, columns=columns).unify_dictionaries()
        if table.num_rows == 0:
            continue
        keys = []
        for name in columns:
            values = table[name].combine_chunks()
            if pc.count_distinct(values.dictionary).as_py() == len(values.dictionary):
                # Polars fills the nulls: pyarrow's fill_null(-1) builds a scalar, and that
                # imports pandas when it is installed (a quarter second per process).
                keys.append(pl.Series(values.indices).fill_null(-1).to_numpy())
            else:  # rank the decoded strings instead (null codes rank first)
                decoded = values.dictionary_decode()
                keys.append(pc.dense_rank(decoded, null_placement="at_start").to_numpy())
        doc, code = keys
        new_doc = doc[1:] != doc[:-1]
        first = tuple(table[name][0].as_py() for name in columns)
        if (~new_doc & (code[1:] == code[:-1])).any() or first == last:
            return True, 0, 0
        documents += int(new_doc.sum()) + (last is None or first[0] != last[0])
        labels += table.num_rows - table["code"].null_count
        last = tuple(table[name][-1].as_py() for name in columns)
    return False, documents, labels


def _write_unscored(
    con, record: InputRecord, out: Path, *, keep: str, is_gold: bool, name: str, check: bool
) -> None:
    """Write the unscored rows of ``labels`` sorted, then make sure no (doc_id, code) repeats.

    In the sorted file a repeated pair is a row equal to the one before it, which one
    vectorised comparison finds; only then are the duplicates counted and the file written
    again, grouped. Files without duplicates (nearly all) are never grouped.
    """
    columns = "doc_id, code" + ("" if is_gold else ", score")
    _copy_sorted(con, f"SELECT {columns} FROM labels {keep}", out)
    repeats, record.documents, record.labels = _scan_sorted(out)
    if not check:  # already grouped, and counted
        return
    if not repeats:
        if _has_dropped(con):  # the pairs a policy dropped may have held duplicates
            _count_duplicates(con, record, name, rows="dropped")
        return
    _count_duplicates(con, record, name)
    record.documents, record.labels = con.execute("""
        SELECT count(DISTINCT doc_id), count(DISTINCT (doc_id, code)) FILTER (code IS NOT NULL)
        FROM labels""").fetchone()
    score = "" if is_gold else ", max(score) AS score"
    _copy_sorted(con, f"SELECT doc_id, code{score} FROM labels {keep} GROUP BY ALL", out)


def pool_labels(
    parts: list[tuple[InputRecord, Path]], *, out: str | Path, name: str
) -> InputRecord:
    """Pool normalised label tables (one per file, with their records) into ``out``.

    A (document, code) pair in several files counts once, as within a file; a document that is
    empty in one file but has codes in another is not empty. The pooled record sums the
    counts, names every file in ``path`` (joined by ``" + "``), takes as ``sha256`` the sha256
    of the files' ``sha256  path`` lines (as ``sha256sum`` prints them) and keeps each file's
    own record under ``files``.
    """
    records = [record for record, _path in parts]
    con = duckdb.connect()
    sources = [duckdb_path(path) for _record, path in parts]
    con.execute(
        "CREATE TEMP TABLE pooled AS SELECT doc_id, code FROM read_parquet($paths)",
        {"paths": sources},
    )
    with atomic_path(out) as tmp:
        con.execute(f"""
            COPY (SELECT DISTINCT doc_id, code FROM pooled
                  WHERE code IS NOT NULL
                     OR doc_id NOT IN (SELECT doc_id FROM pooled WHERE code IS NOT NULL)
                  ORDER BY doc_id, code NULLS FIRST)
            TO '{_sql_path(tmp)}' (FORMAT parquet, COMPRESSION zstd)""")
    documents, labels = con.execute(
        "SELECT count(DISTINCT doc_id), count(DISTINCT (doc_id, code)) FILTER (code IS NOT NULL) "
        "FROM pooled"
    ).fetchone()
    unknown: dict[str, int] = {}
    for record in records:
        for code, n in record.unknown_codes.items():
            unknown[code] = unknown.get(code, 0) + n
    listing = "".join(f"{r.sha256}  {r.path}\n" for r in records)

    def joined(values) -> str:
        return ", ".join(dict.fromkeys(v for v in values if v))

    pooled = InputRecord(
        name=name,
        path=" + ".join(r.path for r in records),
        sha256=hashlib.sha256(listing.encode()).hexdigest(),
        format=joined(r.format for r in records),
        rows=sum(r.rows for r in records),
        documents=documents,
        labels=labels,
        code_format=joined(r.code_format for r in records),
        # pairs repeated within a file, and pairs in several files
        duplicates_removed=sum(r.duplicates_removed for r in records)
        + sum(r.labels for r in records)
        - labels,
        below_threshold=sum(r.below_threshold for r in records),
        outside_top_k=sum(r.outside_top_k for r in records),
        unknown_codes=dict(sorted(unknown.items())),
        unknown_code_policy=records[0].unknown_code_policy,
        unknown_documents_dropped=sum(r.unknown_documents_dropped for r in records),
        code_system=records[0].code_system,
        other_version_rows=sum(r.other_version_rows for r in records),
        files=[asdict(r) for r in records],
    )
    log.info(
        "%s: %d files pooled: %d labels over %d documents", name, len(records), labels, documents
    )
    return pooled


def _select_by_score(
    con,
    record: InputRecord,
    options: LabelOptions,
    default: float,
    tuned: TunedThresholds | None = None,
) -> None:
    """Keep predictions with score >= threshold and/or among the top_k of their document
    (a tuned threshold, per code where it has one, replaces the threshold)."""
    threshold = options.threshold
    if threshold is None and options.top_k is None:
        threshold = default
    if tuned is not None:
        threshold = tuned.threshold
        record.tuned_threshold = {**tuned.source, "threshold": tuned.threshold}
    rule = []
    if threshold is not None:
        how = " (tuned on dev" + (", per code" if tuned.per_code else "") + ")" if tuned else ""
        rule.append(f"score ≥ {threshold:g}{how}")
    if options.top_k is not None:
        rule.append(f"top {options.top_k}")
    record.selection = " and ".join(rule)
    if threshold is not None:
        per_code = pl.DataFrame(
            list((tuned.per_code if tuned else {}).items()),
            schema={"code": pl.String, "threshold": pl.Float64},
            orient="row",
        )
        _register(con, "code_thresholds", per_code)
        below = """code IS NOT NULL AND score < coalesce(
            (SELECT t.threshold FROM code_thresholds t WHERE t.code = labels.code), ?)"""
        record.below_threshold = con.execute(
            f"SELECT coalesce(sum(n), 0)::BIGINT FROM labels WHERE {below}", [threshold]
        ).fetchone()[0]
        con.execute(f"DELETE FROM labels WHERE {below}", [threshold])
    if options.top_k is not None:
        # Ties are broken by code so that the selection never depends on row order.
        con.execute("""
            CREATE OR REPLACE TEMP TABLE ranked AS
            SELECT *, row_number() OVER (PARTITION BY doc_id ORDER BY score DESC, code) AS rank
            FROM (SELECT doc_id, code, max(score) AS score FROM labels
                  WHERE code IS NOT NULL GROUP BY doc_id, code)""")
        record.outside_top_k = con.execute(
            "SELECT count(*) FROM ranked WHERE rank > ?", [options.top_k]
        ).fetchone()[0]
        con.execute(
            """
            DELETE FROM labels WHERE code IS NOT NULL AND (doc_id, code) IN
            (SELECT (doc_id, code) FROM ranked WHERE rank > ?)""",
            [options.top_k],
        )


def _write_scores(
    con,
    record: InputRecord,
    out: str | Path,
    *,
    has_score: bool,
    known: LevelTable,
    gold_docs: str | Path | None,
    name: str,
) -> None:
    """Every score of the file (``doc_id, code, score``, sorted), for ranking and tuning.

    Scores of documents the gold lacks are dropped (among the selected rows the
    ``unknown_docs`` policy already refused or dropped them). Codes the hierarchy lacks are
    dropped too under ``unknown_codes: drop``; otherwise they stay (ranking needs no hierarchy;
    the levels leave out what they cannot place).
    """
    if not has_score:
        con.execute("CREATE TEMP TABLE scored (doc_id VARCHAR, code VARCHAR, score DOUBLE)")
    if has_score and gold_docs is not None:
        outside = "doc_id NOT IN (SELECT doc_id FROM read_parquet(?))"
        extra = con.execute(
            f"SELECT count(DISTINCT doc_id) FROM scored WHERE {outside}", [duckdb_path(gold_docs)]
        ).fetchone()[0]
        if extra:
            con.execute(f"DELETE FROM scored WHERE {outside}", [duckdb_path(gold_docs)])
            log.info("%s: scores of %d document(s) not in %s dropped", name, extra, gold_of(name))
    if has_score and record.unknown_code_policy == "drop":
        _register(con, "known_codes", known.frame.select("code"))
        con.execute("DELETE FROM scored WHERE code NOT IN (SELECT code FROM known_codes)")
    record.scored_pairs = con.execute("SELECT count(*) FROM scored").fetchone()[0]
    counted = _counted_scores(con, record, known, gold_docs) if has_score else {}
    with atomic_path(out) as tmp:
        con.execute(f"""
            COPY (SELECT doc_id, code, score FROM scored ORDER BY doc_id, code)
            TO '{_sql_path(tmp)}' (FORMAT parquet, COMPRESSION zstd)""")
        if counted:
            mark_counted(tmp, counted)
    if has_score:
        log.info("%s: %d scores kept for ranking", name, record.scored_pairs)


def _counted_scores(
    con, record: InputRecord, known: LevelTable, gold_docs: str | Path | None
) -> dict[str, str]:
    """The scored codes ranking must not place (code -> status): the decisions' counted codes,
    and under ``unknown_codes: count`` every scored code the hierarchy and the gold lack
    (selected or not)."""
    counted = {c: INVALID if c in record.invalid_codes else UNKNOWN for c in record.counted_codes}
    if record.unknown_code_policy != COUNT:
        return counted
    codes = {c for (c,) in con.execute("SELECT DISTINCT code FROM scored").fetchall()}
    codes -= set(known.frame["code"].to_list())
    if codes and gold_docs is not None:
        gold = con.execute(
            "SELECT DISTINCT code FROM read_parquet(?)", [duckdb_path(gold_docs)]
        ).fetchall()
        codes -= {c for (c,) in gold}
    return dict.fromkeys(sorted(codes), UNKNOWN) | counted


def _apply_unknown_codes(con, record: InputRecord, job: LabelJob, path: Path, name: str) -> None:
    """Apply the unknown-code policy to the codes the hierarchy lacks; the malformed
    predictions kept under ``malformed_codes: count`` are counted apart (``invalid_codes``), and
    with the non-existent codes kept under ``unknown_codes: count`` they are the file's counted
    codes, placed nowhere, unless the gold holds the same code (then it is the gold's, placed
    as the gold's is: a match)."""
    hierarchy, policy = job.hierarchy, job.unknown_codes
    codes = con.execute("""
        SELECT code, sum(n)::BIGINT FROM labels WHERE code IS NOT NULL GROUP BY code
        ORDER BY code
    """).fetchall()
    known = set(hierarchy.frame["code"].to_list())
    invalid = record.invalid_codes
    record.invalid_codes = {code: n for code, n in codes if code in invalid}
    record.unknown_codes = {
        code: n for code, n in codes if code not in known and code not in invalid
    }
    check_unknown_codes(
        record.unknown_codes, hierarchy=hierarchy, policy=policy, path=path, name=name
    )
    if record.unknown_codes and policy == "drop":
        _drop(con, "list_contains(?, code)", [list(record.unknown_codes)])
    counted = dict.fromkeys(record.invalid_codes, INVALID)
    if policy == COUNT:
        counted |= dict.fromkeys(record.unknown_codes, UNKNOWN)
    if counted and job.gold_docs is not None:
        gold = con.execute(
            "SELECT DISTINCT code FROM read_parquet(?) WHERE code IS NOT NULL",
            [duckdb_path(job.gold_docs)],
        ).fetchall()
        for (code,) in gold:
            counted.pop(code, None)
    record.counted_codes = sorted(counted)
    if counted:
        record.warnings.append(
            f"model {name}: {len(counted)} predicted code(s) are not codes of the release or "
            f"not codes at all ({preview(sorted(counted), 5)}): each is a false positive at the "
            "leaf level (flat) and at no other level (set-based, CoPHE); ICM, hierarchical F, "
            "LCA-F and PROP-F leave them out"
        )


def _apply_unknown_docs(
    con, record: InputRecord, gold_docs: str | Path, policy: str, path: Path, name: str
) -> None:
    con.execute(
        "CREATE TEMP TABLE gold_docs AS SELECT DISTINCT doc_id FROM read_parquet(?)",
        [duckdb_path(gold_docs)],
    )
    extra = con.execute("""
        SELECT DISTINCT doc_id FROM labels WHERE doc_id NOT IN (SELECT doc_id FROM gold_docs)
        ORDER BY doc_id""").fetchall()
    docs = [d for (d,) in extra]
    check_unknown_docs(docs, policy=policy, path=path, name=name)
    if docs:
        record.unknown_documents_dropped = len(docs)
        _drop(con, "doc_id NOT IN (SELECT doc_id FROM gold_docs)")


def _sql_path(path: Path) -> str:
    """A path as a SQL string literal (COPY takes no parameters)."""
    return str(path).replace("'", "''")
