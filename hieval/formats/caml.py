"""CAML-style files (Mullenbach et al., 2018), as many ICD-coding repositories still write them.

- ``preds_test.psv``: one line per document, ``hadm_id|code|code|...``, no header; a document
  with no predicted codes is ``hadm_id|``.
- ``pred_100_scores_test.json``: ``{hadm_id: {code: score}}``.
- gold ``test_full.csv``: ``SUBJECT_ID,HADM_ID,TEXT,LABELS`` with ``;``-separated labels; TEXT
  (the note) is never materialised.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl

from hieval.errors import InputError
from hieval.paths import duckdb_path

_ROWS = {"_line": pl.Int64, "doc_id": pl.String, "code": pl.String}


def load_psv(con: duckdb.DuckDBPyConnection, path: Path, name: str, role: str, extras) -> None:
    """Register ``src`` from a pipe-separated CAML prediction (or label) file."""
    rows = []
    with path.open(encoding="utf-8", newline="") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            doc, sep, rest = line.partition("|")
            if not sep or not doc.strip():
                raise InputError(
                    f"{name}: {path}, line {number}: expected 'hadm_id|code|code|...', "
                    f"got {line[:80]!r}"
                )
            codes = [c for c in rest.split("|") if c.strip()]
            rows += [(number, doc.strip(), c) for c in codes] or [(number, doc.strip(), None)]
    con.register("src", pl.DataFrame(rows, schema=_ROWS, orient="row"))


def load_scores(con: duckdb.DuckDBPyConnection, path: Path, name: str, role: str, extras) -> None:
    """Register ``src`` from a CAML score file; scores stay text until validated."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{name}: {path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise InputError(
            f"{name}: {path} must map each document to {{code: score}}, e.g. "
            '{"12345": {"401.9": 0.93}}'
        )
    rows = []
    for number, (doc, scores) in enumerate(data.items(), start=1):
        # A document with no scores is kept (code NULL) so that it still counts as evaluated.
        rows += [(number, str(doc), str(c), json.dumps(v)) for c, v in scores.items()] or [
            (number, str(doc), None, None)
        ]
    con.register("src", pl.DataFrame(rows, schema={**_ROWS, "score": pl.String}, orient="row"))


def looks_like_gold(path: Path) -> bool:
    """True when a CSV's header is CAML's gold layout (it has HADM_ID and LABELS)."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        header = {h.strip().upper() for h in handle.readline().split(",")}
    return {"HADM_ID", "LABELS"} <= header


def load_gold(con: duckdb.DuckDBPyConnection, path: Path, name: str, role: str, extras) -> None:
    """Register ``src`` from a CAML gold CSV, streaming past the note text."""
    rel = con.read_csv(
        duckdb_path(path), header=True, all_varchar=True, sep=",", quotechar='"', escapechar='"'
    )
    columns = {c.upper(): c for c in rel.columns}
    missing = [c for c in ("HADM_ID", "LABELS") if c not in columns]
    if missing:
        raise InputError(
            f"{name}: {path} lacks column(s) {missing}; CAML gold needs "
            f"SUBJECT_ID,HADM_ID,TEXT,LABELS (found {rel.columns})"
        )
    rel.select(
        duckdb.SQLExpression("row_number() OVER ()").alias("_line"),
        duckdb.ColumnExpression(columns["HADM_ID"]).alias("doc_id"),
        duckdb.ColumnExpression(columns["LABELS"]).alias("labels"),
    ).create_view("caml_gold", replace=True)
    con.sql("""
        SELECT _line, doc_id,
               unnest(CASE WHEN coalesce(trim(labels), '') = '' THEN [NULL]
                           ELSE string_split(labels, ';') END) AS code
        FROM caml_gold""").create_view("src", replace=True)
