"""The native long format: ``doc_id, code[, score][, code_type]`` in CSV, TSV or Parquet."""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb

from hieval.errors import InputError
from hieval.paths import duckdb_path

SEPARATORS = {".csv": ",", ".tsv": "\t", ".txt": "\t"}


def check_header(path: Path, name: str, separator: str) -> list[str]:
    """The header's column names; a duplicated name is an error (it would shadow a column)."""
    with path.open(encoding="utf-8", errors="replace", newline="") as handle:
        header = next(csv.reader(handle, delimiter=separator), [])
    names = [h.strip().lower() for h in header]
    dupes = sorted({h for h in names if names.count(h) > 1})
    if dupes:
        raise InputError(
            f"{name}: {path}, line 1: column {dupes[0]!r} appears more than once in the header "
            f"{header}; remove the duplicate column"
        )
    return names


def load(con: duckdb.DuckDBPyConnection, path: Path, name: str, role: str, extras) -> None:
    """Register ``src``; CSV/TSV are read as text so codes keep their leading zeros."""
    if path.suffix.lower() == ".parquet":
        try:
            rel = con.read_parquet(duckdb_path(path))
        except duckdb.Error as exc:
            first = str(exc).splitlines()[0]
            raise InputError(
                f"{name}: {path} is not a readable Parquet file ({first}); re-export it"
            ) from None
        rel.create_view("src", replace=True)
        return
    separator = SEPARATORS.get(path.suffix.lower())
    if separator is None:
        raise InputError(f"{name}: long format needs .parquet, .csv or .tsv, not {path.name}")
    check_header(path, name, separator)
    rel = con.read_csv(duckdb_path(path), sep=separator, header=True, all_varchar=True)
    rel.create_view("long_in")
    # Data rows are numbered from 1; the line in the file is one more (the header).
    con.sql("SELECT *, row_number() OVER () + 1 AS _line FROM long_in").create_view("src")
