"""The native long format: ``doc_id, code[, score][, code_type]`` in CSV, TSV or Parquet."""

from __future__ import annotations

from pathlib import Path

import duckdb

from hieval.errors import InputError, preview, preview_value
from hieval.inputs.formats import text
from hieval.paths import duckdb_path

SEPARATORS = {".csv": ",", ".tsv": "\t", ".txt": "\t"}
# A long-format record is an id, a code and a score: a line of megabytes is the wrong file (or
# an unbalanced quote swallowing the rest), which deserves a message rather than a long read.
MAX_LINE_SIZE = 2 * text.MB
WHAT = "doc_id,code[,score]"
LONG_WHAT = f"long format ({WHAT})"


def check_header(path: Path, name: str, separator: str) -> list[str]:
    """The header's column names (BOM and surrounding spaces dropped); a duplicated name is an
    error (it would shadow a column), and an unnamed column gets DuckDB's ``columnN`` name."""
    header = text.header(path, name, separator)
    names = [h.strip() or f"column{i}" for i, h in enumerate(header)]
    lowered = [h.lower() for h in names]
    dupes = sorted({h for h in lowered if lowered.count(h) > 1})
    if dupes:
        raise InputError(
            f"{name}: {path}, line 1: column {preview_value(dupes[0])} appears more than once "
            f"in the header ({preview(header, 20)}); remove the duplicate column"
        )
    return names


def read_csv(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    names: list[str],
    separator: str,
    *,
    name: str,
    max_line_size: int,
    what: str,
) -> duckdb.DuckDBPyRelation:
    """``path`` as text columns named from its header, with no sniffing.

    Sniffing guesses: it can take a ragged row for the header or skip leading rows. With the
    columns given, every row must match the header, quotes are RFC 4180 and codes stay text.
    A record longer than ``max_line_size`` (``what`` says what a record holds) is refused
    wherever it is: DuckDB refuses it, except at the end of the file, which is checked here.
    """
    text.check_last_record(path, name, separator, max_line_size, what)
    return con.read_csv(
        duckdb_path(path),
        header=True,
        sep=separator,
        quotechar='"',
        escapechar='"',
        columns=dict.fromkeys(names, "VARCHAR"),
        auto_detect=False,
        max_line_size=max_line_size,
    )


def load(con: duckdb.DuckDBPyConnection, path: Path, name: str, role: str, extras) -> None:
    """Register ``src``; CSV/TSV are read as text so codes keep their leading zeros.

    ``_line`` numbers the data records from 1 (blank lines not counted); the physical line is
    worked out only when a message needs it (:func:`hieval.inputs.formats.locate`).
    """
    if path.suffix.lower() == ".parquet":
        # A read error surfaces in open_source, which words it (hieval.inputs.formats.read_error).
        con.read_parquet(duckdb_path(path)).create_view("src", replace=True)
        return
    separator = SEPARATORS.get(path.suffix.lower())
    if separator is None:
        raise InputError(f"{name}: long format needs .parquet, .csv or .tsv, not {path.name}")
    names = check_header(path, name, separator)
    if not names:
        raise InputError(f"{name}: {path} holds only blank lines; long format needs a header")
    read_csv(
        con, path, names, separator, name=name, max_line_size=MAX_LINE_SIZE, what=LONG_WHAT
    ).create_view("long_in", replace=True)
    con.sql("SELECT *, row_number() OVER () AS _line FROM long_in").create_view("src", replace=True)
