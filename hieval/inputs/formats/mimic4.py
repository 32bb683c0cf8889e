"""MIMIC-IV ``hosp/diagnoses_icd`` and ``hosp/procedures_icd`` tables, read as they ship.

Layout (PhysioNet MIMIC-IV v2 and v3), CSV, usually gzip-compressed (``.csv.gz``)::

    diagnoses_icd:  subject_id,hadm_id,seq_num,icd_code,icd_version
    procedures_icd: subject_id,hadm_id,seq_num,chartdate,icd_code,icd_version

One row per code of a hospital admission, so ``hadm_id`` is the document and ``icd_code`` the
code, undotted (``E119``, ``4019``, ``0DTJ4ZZ``). Both tables mix ICD-9 admissions (before
October 2015) and ICD-10 ones; an evaluation uses one system, so the reader keeps the rows of
one ``icd_version`` and counts the others (:func:`other_version_rows`) for the input record.

Diagnosis or procedure? The code syntax cannot say (``4019`` is diagnosis 401.9 or procedure
40.19), so every row gets a ``code_type``. It is decided by the columns, not the file name
(files get renamed): ``procedures_icd`` is the table with ``chartdate``. A file name that says
the opposite (``diagnoses_icd`` with a ``chartdate`` column) is refused as a likely mix-up.

Gzip: DuckDB's CSV reader decompresses ``.gz`` by itself, and :mod:`hieval.inputs.formats.text`
(header, BOM, over-long and corrupt lines) reads through ``gzip``. Places of bad values in
messages are data-row numbers (``row 12``), not file lines.
"""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb

from hieval.codes.icd9 import DX, PROC
from hieval.errors import InputError, preview, preview_value
from hieval.inputs.formats import long, text

log = logging.getLogger(__name__)

#: Columns every MIMIC-IV ICD table has (compared case-insensitively).
REQUIRED = ("hadm_id", "icd_code", "icd_version")
#: The column only ``procedures_icd`` has.
PROCEDURE_MARKER = "chartdate"
VERSIONS = (9, 10)
_SEPARATORS = {".csv": ",", ".tsv": "\t"}
# A MIMIC-IV row is a few ids and a code; a megabyte-long line is the wrong file.
MAX_LINE_SIZE = text.MB
WHAT = "a MIMIC-IV table (subject_id,hadm_id,...,icd_code,icd_version)"
_COUNTS_TABLE = "mimic4_version_counts"


def separator_of(path: Path, name: str) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    separator = _SEPARATORS.get(suffixes[-1] if suffixes else "")
    if separator is None:
        raise InputError(
            f"{name}: a MIMIC-IV table must be .csv or .csv.gz (or .tsv[.gz]), not {path.name}"
        )
    return separator


def read_header(path: Path, name: str, separator: str = ",") -> list[str]:
    """The header's column names of a plain or gzip-compressed CSV (BOM and spaces dropped)."""
    return [h.strip() for h in text.header(path, name, separator)]


def looks_like_mimic4(path: Path, name: str) -> bool:
    """True when the header has ``hadm_id``, ``icd_code`` and ``icd_version``.

    A file that cannot be read (a corrupt gzip file, a header that is not UTF-8) is an error
    here, not "some other format": the reason is what the user needs to hear.
    """
    try:
        separator = separator_of(path, name)
    except InputError:
        return False
    return set(REQUIRED) <= {h.lower() for h in read_header(path, name, separator)}


def refuse_partial(path: Path, name: str) -> None:
    """Refuse a table whose header holds at least two of the MIMIC-IV columns, not all, and not
    the long format's ``doc_id, code``: a MIMIC-IV table that lost a column, as exports may.

    Why: without all of them the file is taken for another format and refused as one ("cannot
    tell the format", "lacks doc_id, code"), which hides the one missing column.
    """
    try:
        separator = separator_of(path, name)
    except InputError:
        return
    names = read_header(path, name, separator)
    found = {h.lower() for h in names}
    present = [c for c in REQUIRED if c in found]
    if len(present) < 2 or {"doc_id", "code"} <= found:
        return
    missing = [c for c in REQUIRED if c not in found]
    if missing:
        raise InputError(
            f"{name}: {path} looks like a MIMIC-IV diagnoses_icd/procedures_icd table without "
            f"its {preview(missing)} column{'s' if len(missing) > 1 else ''} (found "
            f"{preview(names, 20)}): add {'them' if len(missing) > 1 else 'it'} (format "
            "mimic4_icd9 or mimic4_icd10), or write the file in long format (doc_id,code)"
        )


def code_type_of(columns: list[str], path: Path, name: str) -> str:
    """``proc`` for ``procedures_icd`` (it has ``chartdate``), ``dx`` for ``diagnoses_icd``."""
    kind = PROC if PROCEDURE_MARKER in {c.lower() for c in columns} else DX
    stem = path.name.lower()
    named = PROC if "procedure" in stem else DX if "diagnos" in stem else None
    if named is not None and named != kind:
        table = "procedures_icd" if kind == PROC else "diagnoses_icd"
        raise InputError(
            f"{name}: {path} is named like a {'procedure' if named == PROC else 'diagnosis'} "
            f"table but its columns ({preview(columns, 20)}) are those of {table} "
            f"(procedures_icd alone has '{PROCEDURE_MARKER}'); check that the right file is given"
        )
    return kind


def load(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    name: str,
    role: str,
    extras,
    *,
    icd_version: int,
) -> None:
    """Register ``src`` (``doc_id, code, code_type, _line``) with the rows of ``icd_version``.

    ``_line`` numbers the data rows of the whole file from 1 (before rows of the other version
    are skipped), so a message names the row of the file. Rows whose ``icd_version`` is neither
    9 nor 10 are an error; a file without rows of ``icd_version`` is one too (the other version
    was probably meant). The counts per version stay in the connection for
    :func:`other_version_rows`.
    """
    if icd_version not in VERSIONS:
        raise InputError(f"{name}: icd_version must be 9 or 10, not {icd_version!r}")
    separator = separator_of(path, name)
    names = read_header(path, name, separator)
    lowered = [n.lower() for n in names]
    missing = [c for c in REQUIRED if c not in lowered]
    if missing:
        raise InputError(
            f"{name}: {path} lacks column(s) {missing}; a MIMIC-IV diagnoses_icd/procedures_icd "
            f"table has {', '.join(REQUIRED)} (found {preview(names, 20)})"
        )
    dupes = sorted({n for n in lowered if lowered.count(n) > 1})
    if dupes:
        raise InputError(f"{name}: {path}: column {preview_value(dupes[0])} appears more than once")
    kind = code_type_of(names, path, name)
    column = {n.lower(): n for n in names}
    long.read_csv(
        con, path, names, separator, name=name, max_line_size=MAX_LINE_SIZE, what=WHAT
    ).select(
        duckdb.SQLExpression("row_number() OVER ()").alias("_line"),
        duckdb.ColumnExpression(column["hadm_id"]).alias("doc_id"),
        duckdb.ColumnExpression(column["icd_code"]).alias("code"),
        duckdb.SQLExpression(f"trim({_quote(column['icd_version'])})").alias("icd_version"),
    ).create_view("mimic4_rows", replace=True)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE {_COUNTS_TABLE} AS
        SELECT icd_version, count(*) AS rows, min(_line) AS first_row,
               min(_line) FILTER (coalesce(trim(code), '') = '') AS first_empty_code
        FROM mimic4_rows GROUP BY icd_version""")
    rows = con.execute(f"SELECT icd_version, rows, first_row FROM {_COUNTS_TABLE}").fetchall()
    counts = {v: (n, first) for v, n, first in rows}
    bad = {v: first for v, (_n, first) in counts.items() if v not in ("9", "10")}
    if bad:
        value, row = min(bad.items(), key=lambda item: item[1])
        raise InputError(
            f"{name}: {path}, row {row}: icd_version {preview_value(value)} must be 9 or 10"
        )
    other = 10 if icd_version == 9 else 9
    kept = counts.get(str(icd_version), (0, None))[0]
    skipped = sum(n for v, (n, _first) in counts.items() if v != str(icd_version))
    if kept == 0:
        raise InputError(
            f"{name}: {path} holds no ICD-{icd_version} rows ({skipped} rows of ICD-{other}); "
            f"this evaluation keeps icd_version {icd_version}: choose the format "
            f"mimic4_icd{other} and an ICD-{other} hierarchy, or check the file"
        )
    _refuse_empty_code(con, path, name, icd_version)
    if skipped:
        log.info(
            "%s: %d rows of ICD-%d skipped in %s (this evaluation uses ICD-%d)",
            name,
            skipped,
            other,
            path,
            icd_version,
        )
    con.sql(f"""
        SELECT _line, doc_id, code, '{kind}' AS code_type
        FROM mimic4_rows WHERE icd_version = '{icd_version}'""").create_view("src", replace=True)


def _refuse_empty_code(con, path: Path, name: str, icd_version: int) -> None:
    """Every MIMIC-IV row is one code of an admission: a row without ``icd_code`` is a damaged
    row, not an admission without codes (as an empty code is in the long format), which would
    add a document with no labels to the evaluation."""
    ((row,),) = con.execute(
        f"SELECT first_empty_code FROM {_COUNTS_TABLE} WHERE icd_version = ?", [str(icd_version)]
    ).fetchall()
    if row is not None:
        raise InputError(
            f"{name}: {path}, row {row}: empty icd_code; every row of a MIMIC-IV table is one "
            "code of an admission: fill it in or remove the row"
        )


def _quote(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def other_version_rows(con: duckdb.DuckDBPyConnection, icd_version: int) -> int:
    """How many rows :func:`load` skipped because they are of the other ``icd_version``."""
    (skipped,) = con.execute(
        f"SELECT coalesce(sum(rows), 0) FROM {_COUNTS_TABLE} WHERE icd_version <> ?",
        [str(icd_version)],
    ).fetchone()
    return int(skipped)
