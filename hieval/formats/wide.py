"""Wide probability tables as written by the medical-coding reproducibility study (Edin et al.,
2023): one Feather or Parquet file with an ``_id`` column, a ``target`` list column of gold
codes, and one score column per code. The same file is the gold (``target``) and a model's
predictions (the score columns)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.feather as feather
import pyarrow.parquet as pq

from hieval.errors import InputError
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
        else:
            con.register("wide_in", feather.read_table(path))
    except (OSError, ValueError) as exc:
        raise InputError(f"{name}: {path} is not a readable Feather file ({exc})") from None
    columns = con.sql("SELECT * FROM wide_in LIMIT 0").columns
    missing = [c for c in (ID, TARGET) if c not in columns]
    if missing:
        raise InputError(
            f"{name}: {path} lacks column(s) {missing}; a wide table needs `_id`, `target` and "
            "one score column per code"
        )
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
    con.sql(f"""
        SELECT row_number() OVER () AS {ROW}, * EXCLUDE ("{TARGET}") FROM wide_in
    """).create_view("wide_rows", replace=True)
    con.sql(f"""
        SELECT {ROW} AS _line, CAST("{ID}" AS VARCHAR) AS doc_id, code,
               CAST(score AS VARCHAR) AS score
        FROM (FROM wide_rows UNPIVOT INCLUDE NULLS
              (score FOR code IN (COLUMNS(* EXCLUDE ("{ID}", {ROW})))))
        UNION ALL
        SELECT {ROW}, CAST("{ID}" AS VARCHAR), NULL, NULL FROM wide_rows
    """).create_view("src", replace=True)
