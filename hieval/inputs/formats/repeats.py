"""Repeats in formats whose layout gives each label one cell: refused, never merged.

A long file that lists a (document, code) twice repeats one label, and counting it once is
right. A matrix, a wide table or a CAML score file cannot: each (document, code) is one cell, so
a second cell for it (a column ``4019`` beside ``401.9``, ``V10.0`` beside ``v10.0``, a JSON
document `` 1`` beside ``1``) is two different scores or decisions for one label, and merging
them by their maximum reports a number the file never held. The repeat only shows once ids are
trimmed and codes read as the code system reads them, so it is found here, on the normalised
labels, whatever the format's reader saw.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from hieval.errors import InputError, preview, preview_value
from hieval.inputs.formats import Format


def check_cell_repeats(
    con: duckdb.DuckDBPyConnection,
    mapping: pl.DataFrame,
    spec: Format,
    *,
    role: str,
    has_score: bool,
    path: Path,
    name: str,
) -> None:
    """Refuse two columns that read as one code, and a (document, code) given two scores.

    ``mapping`` holds each raw code (``raw``) and the code it reads as (``code``); ``labels``
    in ``con`` holds the normalised rows with their multiplicity ``n``.
    """
    if spec.codes_name_columns(role):
        _refuse_repeated_columns(mapping, spec, path=path, name=name)
    if spec.one_score_per_label and has_score:
        _refuse_repeated_cells(con, mapping, spec, path=path, name=name)


def _spellings(mapping: pl.DataFrame, code: str) -> list[str]:
    return sorted(set(mapping.filter(pl.col("code") == code)["raw"].to_list()))


def _refuse_repeated_columns(mapping: pl.DataFrame, spec: Format, *, path: Path, name: str):
    repeated = mapping.filter(pl.col("code").is_duplicated()).sort("code", "raw")
    if repeated.is_empty():
        return
    code = repeated["code"][0]
    raise InputError(
        f"{name}: {path}: columns {preview(_spellings(mapping, code))} are all code "
        f"{preview_value(code)} once read as codes; each column of a {spec.name} file needs its "
        "own code: remove or merge the repeated column"
    )


def _refuse_repeated_cells(con, mapping: pl.DataFrame, spec: Format, *, path: Path, name: str):
    repeats = con.execute("""
        SELECT doc_id, code FROM labels WHERE code IS NOT NULL
        GROUP BY doc_id, code HAVING sum(n) > 1 ORDER BY doc_id, code LIMIT 1""").fetchall()
    if not repeats:
        return
    ((doc, code),) = repeats
    docs = [
        row[0]
        for row in con.execute(
            "SELECT DISTINCT CAST(doc_id AS VARCHAR) AS d FROM src "
            "WHERE trim(CAST(doc_id AS VARCHAR)) = ? ORDER BY d",
            [doc],
        ).fetchall()
    ]
    written = f"codes written {preview(_spellings(mapping, code))}"
    if len(docs) > 1:
        written = f"documents written {preview(docs)}, {written}"
    raise InputError(
        f"{name}: {path}: document {preview_value(doc)} has more than one score for code "
        f"{preview_value(code)} ({written}); a {spec.name} file holds one score per document "
        "and code: remove the repeat"
    )
