"""Readers that turn what ICD-coding models actually write into hieval's long format.

Every adapter registers a DuckDB view ``src`` with the columns ``doc_id, code`` and optionally
``score``, ``code_type`` and ``_line`` (the PSV line, CSV record, table row or JSON record that
produced the row; :func:`locate` turns it into words for error messages). Validation and
normalisation then happen once, in :mod:`hieval.inputs.normalize`, whatever the format. Nothing here
unpickles: NumPy files are loaded with ``allow_pickle=False``.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import duckdb

from hieval.errors import InputError
from hieval.hints import setting
from hieval.inputs.formats import caml, dense, long, mimic4, text, wide

GOLD, PREDICTIONS = "gold", "predictions"


@dataclass(frozen=True)
class Format:
    """An input format: its reader and the roles (gold/predictions) it can play."""

    name: str
    load: Callable[..., None]
    roles: tuple[str, ...]
    summary: str
    #: The roles in which each code names a column (a matrix's, a wide table's score column):
    #: two columns that read as one code are one code twice, a conflict, not a duplicate.
    code_columns: tuple[str, ...] = ()
    #: Each (document, code) is one cell (a matrix or table cell, a JSON key): a second score
    #: for a pair, once ids are trimmed and codes read, is a conflict, not a duplicate.
    one_score_per_label: bool = False

    def codes_name_columns(self, role: str) -> bool:
        """Whether, read in ``role``, each of the file's codes names a column of its own."""
        return role in self.code_columns


FORMATS = {
    f.name: f
    for f in (
        Format(
            "long",
            long.load,
            (GOLD, PREDICTIONS),
            "long CSV/TSV/Parquet: doc_id,code[,score][,code_type]",
        ),
        Format(
            "caml_psv",
            caml.load_psv,
            (GOLD, PREDICTIONS),
            "CAML preds_test.psv: hadm_id|code|code|... per line, no header",
        ),
        Format(
            "caml_scores",
            caml.load_scores,
            (PREDICTIONS,),
            "CAML pred_100_scores_*.json: {doc: {code: score}}",
            one_score_per_label=True,
        ),
        Format(
            "caml_gold",
            caml.load_gold,
            (GOLD, PREDICTIONS),
            "CAML gold CSV: SUBJECT_ID,HADM_ID,TEXT,LABELS with ';'-separated labels",
        ),
        Format(
            "wide",
            wide.load,
            (GOLD, PREDICTIONS),
            "wide Feather/Parquet: one score column per code, `target` list, `_id`",
            code_columns=(PREDICTIONS,),
            one_score_per_label=True,
        ),
        Format(
            "dense",
            dense.load,
            (GOLD, PREDICTIONS),
            ".npy/.npz matrix (documents x codes) with a code list and a document list",
            code_columns=(GOLD, PREDICTIONS),
            one_score_per_label=True,
        ),
        *(
            Format(
                f"mimic4_icd{version}",
                partial(mimic4.load, icd_version=version),
                (GOLD, PREDICTIONS),
                f"MIMIC-IV diagnoses_icd/procedures_icd (.csv[.gz]), ICD-{version} rows only",
            )
            for version in mimic4.VERSIONS
        ),
    )
}
FORMAT_NAMES = ("auto", *FORMATS)


@dataclass(frozen=True)
class Extras:
    """Side files some formats need (dense arrays: the code and document lists)."""

    code_list: str | None = None
    doc_list: str | None = None


def detect(path: Path, name: str, *, mimic4_version: int | None = None) -> str:
    """The format of ``path`` when the file says so unambiguously; otherwise an error.

    A MIMIC-IV table is read at ``mimic4_version`` (an ICD evaluation's own version); without
    one, the user is asked to name the version."""
    suffix = path.suffix.lower()
    by_suffix = {
        ".psv": "caml_psv",
        ".json": "caml_scores",
        ".feather": "wide",
        ".arrow": "wide",
        ".ipc": "wide",
        ".npy": "dense",
        ".npz": "dense",
    }
    if suffix in by_suffix:
        return by_suffix[suffix]
    if suffix == ".parquet":
        return "wide" if wide.looks_wide(path) else "long"
    if suffix in (".csv", ".tsv", ".txt", ".gz") and mimic4.looks_like_mimic4(path, name):
        if mimic4_version is not None:
            return f"mimic4_icd{mimic4_version}"
        # Both ICD versions share MIMIC-IV's tables; which one is evaluated is the user's call.
        raise InputError(
            f"{name}: {path} is a MIMIC-IV diagnoses_icd/procedures_icd table; name its format "
            "mimic4_icd9 or mimic4_icd10 (the rows of that icd_version are kept)"
        )
    if suffix in (".csv", ".tsv", ".txt", ".gz"):
        mimic4.refuse_partial(path, name)  # not "of no known format" for want of one column
    if suffix in (".csv", ".tsv", ".txt"):
        return "caml_gold" if caml.looks_like_gold(path, name) else "long"
    if suffix == ".gz":
        text.check_gzip(path, name)  # a damaged file is said to be one, not of no known format
    raise InputError(
        f"{name}: cannot tell the format of {path} from its name; name it with "
        f"{setting('format', 'FORMAT', file=name)}, FORMAT one of {', '.join(FORMATS)}"
    )


def check_file(path: Path, name: str) -> None:
    """The checks every format shares: the file exists, is a file, is not empty, and can be
    opened.

    A path the system cannot even look up (a name over 255 bytes, a NUL byte from a config
    file) is said to be unreadable, not left to surface later as an exception of its own.
    """
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"{name}: file {path} does not exist; check the path") from None
    except (OSError, ValueError) as exc:
        raise text.unreadable(path, name, exc) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{name}: {path} is a directory; point it at a label file")
    if info.st_size == 0:
        raise InputError(f"{name}: file {path} is empty")
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise text.unreadable(path, name, exc) from None


def _csv_layout(path: Path, fmt: str) -> tuple[str, int, str] | None:
    """Separator, longest record and what a record holds, for formats DuckDB reads as CSV
    whose records are numbered by their line (MIMIC-IV tables are numbered by row)."""
    if fmt == "caml_gold":
        return ",", caml.GOLD_MAX_LINE_SIZE, caml.GOLD_WHAT
    separator = long.SEPARATORS.get(path.suffix.lower())
    if fmt == "long" and separator is not None:
        return separator, long.MAX_LINE_SIZE, long.LONG_WHAT
    return None


def _diagnosable(path: Path, fmt: str, name: str) -> tuple[str, int, str] | None:
    """The layout :func:`text.diagnose` scans a file refused by DuckDB with."""
    if fmt.startswith("mimic4_"):
        try:
            return mimic4.separator_of(path, name), mimic4.MAX_LINE_SIZE, mimic4.WHAT
        except InputError:
            return None
    return _csv_layout(path, fmt)


def locate(path: Path, fmt: str, name: str, rows: Iterable[int]) -> dict[int, str]:
    """Where each row of ``src`` came from, in the file's own terms: the line a CSV record
    starts on, the row of a table or matrix, the record of a JSON file.

    CSV records are counted by DuckDB; their lines are found here, by one scan of the file,
    only when a message needs them, so that valid files pay nothing.
    """
    rows = sorted(set(rows))
    layout = _csv_layout(path, fmt)
    if layout is not None:
        lines = text.record_lines(path, name, layout[0], rows)
        return {
            r: f"{path}, line {lines[r]}" if r in lines else f"{path}, record {r}" for r in rows
        }
    if fmt == "caml_psv":
        return {r: f"{path}, line {r}" for r in rows}
    unit = "record" if fmt == "caml_scores" else "row"
    return {r: f"{path}, {unit} {r}" for r in rows}


def _duckdb_reason(exc: duckdb.Error) -> str:
    """DuckDB's first line and its reason line, without the dump of reader options."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    skip = ("Original Line", "Possible", "file =", "delimiter =")
    reasons = [line for line in lines[1:] if not line.startswith(skip) and " = " not in line]
    return "; ".join(lines[:1] + reasons[:1])


def read_error(path: Path, fmt: str, name: str, exc: duckdb.Error) -> InputError:
    """The user's message for a file DuckDB failed to read: the real reason where it can be
    found (a line that is not UTF-8, too long, or with the wrong number of fields)."""
    layout = _diagnosable(path, fmt, name)
    if layout is not None:
        text.diagnose(path, name, *layout)  # raises the precise message when it finds one
    elif path.suffix.lower() == ".parquet":
        return InputError(
            f"{name}: {path} is not a readable Parquet file ({_duckdb_reason(exc)}); re-export it"
        )
    return InputError(f"{name}: cannot read {path} as {fmt}: {_duckdb_reason(exc)}")


def open_source(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    name: str,
    role: str,
    *,
    fmt: str = "auto",
    extras: Extras | None = None,
) -> str:
    """Register the view ``src`` for ``path`` and return the format used."""
    check_file(path, name)
    fmt = detect(path, name) if fmt == "auto" else fmt
    spec = FORMATS.get(fmt)
    if spec is None:
        raise InputError(f"{name}: unknown format {fmt!r}; use one of {', '.join(FORMAT_NAMES)}")
    if role not in spec.roles:
        raise InputError(
            f"{name}: {path} is read as {fmt}, which holds predictions only, not {role}; "
            "name the right format"
        )
    extras = extras or Extras()
    for key in ("code_list", "doc_list"):
        if getattr(extras, key) and fmt != "dense":  # ignored, it would misread nothing: say so
            raise InputError(
                f"{name}: {setting(key, 'PATH', file=name)} applies to dense score matrices "
                f"only, and {path} is read as {fmt}; remove it, or point it at a matrix"
            )
    try:
        spec.load(con, path, name, role=role, extras=extras)
    except duckdb.Error as exc:
        raise read_error(path, fmt, name, exc) from None
    return fmt
