"""Wide probability tables as written by the medical-coding reproducibility study (Edin et al.,
2023): one Feather or Parquet file with an ``_id`` column, a ``target`` list column of gold
codes, and one score column per code. The same file is the gold (``target``) and a model's
predictions (the score columns)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.feather as feather
import pyarrow.parquet as pq

from hieval.errors import InputError, preview, preview_value
from hieval.paths import duckdb_path

ID, TARGET = "_id", "target"
ROW = "_hieval_row"


def looks_wide(path: Path) -> bool:
    """True for a Parquet file with the ``_id`` and ``target`` columns of a wide table."""
    try:
        names = set(pq.read_schema(path).names)
    except Exception:
        return False
    return {ID, TARGET} <= names


def load(con: duckdb.DuckDBPyConnection, path: Path, name: str, role: str, extras) -> None:
    """Register ``src``: the ``target`` lists for the gold, the score columns otherwise."""
    try:
        if path.suffix.lower() == ".parquet":
            con.read_parquet(duckdb_path(path)).create_view("wide_in", replace=True)
            names = pq.read_schema(path).names
        else:
            table = feather.read_table(path)
            con.register("wide_in", table)
            names = table.schema.names
    except (OSError, ValueError) as exc:
        raise InputError(f"{name}: {path} is not a readable Feather file ({exc})") from None
    _refuse_repeated_names(names, path, name)
    columns = con.sql("SELECT * FROM wide_in LIMIT 0").columns
    missing = [c for c in (ID, TARGET) if c not in columns]
    if missing:
        raise InputError(
            f"{name}: {path} lacks column(s) {missing}; a wide table needs `_id`, `target` and "
            "one score column per code"
        )
    _refuse_repeated_documents(con, path, name)
    if role == "gold":
        target_type = con.sql(f'SELECT "{TARGET}" FROM wide_in LIMIT 0').types[0]
        if target_type.id != "list":
            raise InputError(
                f"{name}: {path}: column `{TARGET}` is {target_type}, not a list of codes; a "
                "wide table's gold is one list of code strings per document (e.g. "
                "['401.9', '96.04']); re-export it with `target` as a list column"
            )
        con.sql(f"""
            SELECT row_number() OVER () AS _line, CAST("{ID}" AS VARCHAR) AS doc_id,
                   unnest(CASE WHEN len("{TARGET}") = 0 OR "{TARGET}" IS NULL THEN [NULL]
                               ELSE CAST("{TARGET}" AS VARCHAR[]) END) AS code
            FROM wide_in""").create_view("src", replace=True)
        return
    if len(columns) == 2:
        raise InputError(f"{name}: {path} has no score columns besides `_id` and `target`")
    # _line is the document's row in the table, so that a message names the row, the document
    # and the code of a bad score rather than a position among the unpivoted cells. Empty
    # (null) cells are kept, and so refused as empty scores, as an empty CSV cell is: UNPIVOT
    # would drop them without a word.
    # UNPIVOT needs one type: a score column exported as text ('0.9', 'nan', ' ') beside numeric
    # ones makes every score column text first, so that each cell is validated as every score is.
    # Numeric columns alone are unpivoted as they are (a FLOAT beside a DOUBLE is widened).
    score_columns = f'COLUMNS(* EXCLUDE ("{ID}", "{TARGET}"))'
    kinds = con.sql(f"SELECT {score_columns} FROM wide_in LIMIT 0").types
    text = any(kind.id == "varchar" for kind in kinds)
    con.sql(f"""
        SELECT row_number() OVER () AS {ROW}, "{ID}",
               {f"CAST({score_columns} AS VARCHAR)" if text else score_columns}
        FROM wide_in
    """).create_view("wide_rows", replace=True)
    con.sql(f"""
        SELECT {ROW} AS _line, CAST("{ID}" AS VARCHAR) AS doc_id, code,
               CAST(score AS VARCHAR) AS score
        FROM (FROM wide_rows UNPIVOT INCLUDE NULLS
              (score FOR code IN (COLUMNS(* EXCLUDE ("{ID}", {ROW})))))
        UNION ALL
        SELECT {ROW}, CAST("{ID}" AS VARCHAR), NULL, NULL FROM wide_rows
    """).create_view("src", replace=True)


def _refuse_repeated_names(names: list[str], path: Path, name: str) -> None:
    """Two columns whose names differ at most in case are one column to DuckDB, which renames
    the second (``v10.0`` becomes ``v10.0_1``, then a malformed code): refused, naming both."""
    first: dict[str, str] = {}
    for column in names:
        if column.lower() in first:
            raise InputError(
                f"{name}: {path}: columns {preview([first[column.lower()], column])} differ at "
                "most in case; "
                "give each code one column, written once"
            )
        first[column.lower()] = column


def _refuse_repeated_documents(con: duckdb.DuckDBPyConnection, path: Path, name: str) -> None:
    """A document on two rows would get two scores per code (or two target lists), merged
    without a word: refused, naming the rows. Ids are compared as they are read (trimmed)."""
    repeat = con.execute(f"""
        SELECT doc_id, list(row ORDER BY row)[:2] AS rows FROM (
            SELECT trim(CAST("{ID}" AS VARCHAR)) AS doc_id, row_number() OVER () AS row
            FROM wide_in)
        WHERE coalesce(doc_id, '') <> ''  -- an empty id is refused as one, row by row
        GROUP BY doc_id HAVING count(*) > 1 ORDER BY min(row) LIMIT 1""").fetchall()
    if repeat:
        ((doc, (first, second)),) = repeat
        raise InputError(
            f"{name}: {path}, rows {first} and {second}: document {preview_value(doc)} appears "
            "more than once; a wide table holds one row per document: remove or merge the repeat"
        )
