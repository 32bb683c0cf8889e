"""Readers that turn what ICD-coding models actually write into hieval's long format.

Every adapter registers a DuckDB view ``src`` with the columns ``doc_id, code`` and optionally
``score``, ``code_type`` and ``row`` (the line or record that produced the row, for error
messages). Validation and normalisation then happen once, in :mod:`hieval.inputs`, whatever the
format. Nothing here unpickles: NumPy files are loaded with ``allow_pickle=False``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from hieval.errors import InputError
from hieval.formats import caml, dense, long, wide

GOLD, PREDICTIONS = "gold", "predictions"


@dataclass(frozen=True)
class Format:
    """An input format: its reader and the roles (gold/predictions) it can play."""

    name: str
    load: Callable[..., None]
    roles: tuple[str, ...]
    summary: str


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
        ),
        Format(
            "dense",
            dense.load,
            (GOLD, PREDICTIONS),
            ".npy/.npz matrix (documents x codes) with a code list and a document list",
        ),
    )
}
FORMAT_NAMES = ("auto", *FORMATS)


@dataclass(frozen=True)
class Extras:
    """Side files some formats need (dense arrays: the code and document lists)."""

    code_list: str | None = None
    doc_list: str | None = None


def detect(path: Path, name: str) -> str:
    """The format of ``path`` when the file says so unambiguously; otherwise an error."""
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
    if suffix in (".csv", ".tsv", ".txt"):
        return "caml_gold" if caml.looks_like_gold(path) else "long"
    raise InputError(
        f"{name}: cannot tell the format of {path} from its name; name it with the `format` "
        f"column (or --format {name}=FORMAT), one of {', '.join(FORMATS)}"
    )


def check_file(path: Path, name: str) -> None:
    """The checks every format shares: the file exists, is a file, and is not empty."""
    if not path.exists():
        raise InputError(f"{name}: file {path} does not exist; check the path")
    if path.is_dir():
        raise InputError(f"{name}: {path} is a directory; point it at a label file")
    if path.stat().st_size == 0:
        raise InputError(f"{name}: file {path} is empty")


def open_source(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    name: str,
    role: str,
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
    try:
        spec.load(con, path, name, role=role, extras=extras or Extras())
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0]
        raise InputError(f"{name}: cannot read {path} as {fmt}: {first}") from None
    return fmt
