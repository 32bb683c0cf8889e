"""CAML-style files (Mullenbach et al., 2018), as many ICD-coding repositories still write them.

- ``preds_test.psv``: one line per document, ``hadm_id|code|code|...``, no header; a document
  with no predicted codes is ``hadm_id|``, or the bare ``hadm_id`` CAML itself writes.
- ``pred_100_scores_test.json``: ``{hadm_id: {code: score}}``.
- gold ``test_full.csv``: ``SUBJECT_ID,HADM_ID,TEXT,LABELS`` with ``;``-separated labels; TEXT
  (the note) is never materialised.

CAML's preprocessing writes a two-digit procedure category with a trailing dot (``34.``: the dot
put after the second character of ``34``). Everywhere else a code that ends with a dot is
malformed (``I10.``, ``401.``: issue 34), so these readers drop that one dot of CAML's layout.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import duckdb
import polars as pl

from hieval.errors import InputError, preview, preview_value
from hieval.inputs.formats import long, text

_ROWS = {"_line": pl.Int64, "doc_id": pl.String, "code": pl.String}
# CAML's logistic-regression baseline writes label indices (0..N-1 into its label list), not
# codes. A label index is a whole number written without a leading zero; undotted ICD-9 codes
# of one or two digits do not occur, and a codes file of many distinct values holds some with
# a leading zero (001-139, 00-09), V or E codes.
_INDEX = re.compile(r"0|[1-9][0-9]*")
INDEX_MIN_DISTINCT = 20
INDEX_HINT = (
    "CAML's LR outputs hold label indices, not codes: map them through the model's label list first"
)
# A gold record carries the whole note (all of an admission's notes concatenated): real MIMIC
# discharge summaries run to hundreds of kB, so allow far more than DuckDB's 2 MB default.
GOLD_MAX_LINE_SIZE = 16 * text.MB
GOLD_WHAT = "CAML gold (SUBJECT_ID,HADM_ID,TEXT,LABELS)"


def load_psv(con: duckdb.DuckDBPyConnection, path: Path, name: str, role: str, extras) -> None:
    """Register ``src`` from a pipe-separated CAML prediction (or label) file."""
    rows = []
    for number, _raw, line in text.decoded_lines(path, name):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        doc, sep, rest = line.partition("|")
        doc = doc.strip()
        # CAML writes a document without codes as its bare id; a line of words is not one.
        if not doc or (not sep and len(doc.split()) != 1):
            raise InputError(
                f"{name}: {path}, line {number}: expected 'hadm_id|code|code|...', "
                f"got {preview_value(line)}"
            )
        codes = [caml_code(c) for c in rest.split("|") if c.strip()]
        rows += [(number, doc, c) for c in codes] or [(number, doc, None)]
    con.register("src", pl.DataFrame(rows, schema=_ROWS, orient="row"))


def label_indices(codes: Iterable[str]) -> tuple[int, int] | None:
    """The smallest and largest value when a file's distinct codes look like label indices:
    all whole numbers without a leading zero, and either many of them or one of one or two
    digits (never an ICD code). None otherwise.

    Asked only of files whose codes the code system refused: there, "ambiguous undotted code
    '100'" would advise a code_type, which turns indices into wrong codes.
    """
    values = {code.strip() for code in codes}
    if not values or not all(_INDEX.fullmatch(value) for value in values):
        return None
    numbers = sorted(int(value) for value in values)
    if len(numbers) >= INDEX_MIN_DISTINCT or numbers[0] < 100:
        return numbers[0], numbers[-1]
    return None


class _Pairs(list):
    """A JSON object's ``(key, value)`` pairs in file order, duplicates kept for checking."""


def load_scores(con: duckdb.DuckDBPyConnection, path: Path, name: str, role: str, extras) -> None:
    """Register ``src`` from a CAML score file; scores stay text until validated.

    A JSON object may legally repeat a key, and ``json`` keeps the last one: a document written
    twice would silently lose its first scores. So repeated documents (and repeated codes within
    a document) are refused.
    """
    try:
        data = json.loads(text.decode_whole(path, name), object_pairs_hook=_Pairs)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: {path} is not valid JSON ({exc})") from None
    if not isinstance(data, _Pairs) or not all(isinstance(v, _Pairs) for _, v in data):
        raise InputError(
            f"{name}: {path} must map each document to {{code: score}}, e.g. "
            '{"12345": {"401.9": 0.93}}'
        )
    seen: dict[str, str] = {}
    rows = []
    for number, (doc, scores) in enumerate(data, start=1):
        # Ids are trimmed when labels are read: " 1" and "1" are one document, written twice.
        if doc.strip() in seen:
            written = preview(dict.fromkeys([seen[doc.strip()], doc]))
            raise InputError(
                f"{name}: {path}, record {number}: document {preview_value(doc.strip())} appears "
                f"more than once (written {written}); JSON keeps only the last, so write each "
                "document once with all its scores"
            )
        seen[doc.strip()] = doc
        codes = [caml_code(c) for c, _ in scores]
        if len(set(codes)) != len(codes):
            repeated = next(c for i, c in enumerate(codes) if c in codes[:i])
            raise InputError(
                f"{name}: {path}: document {preview_value(doc)} lists code "
                f"{preview_value(repeated)} more than once; give each code one score"
            )
        # A document with no scores is kept (code NULL) so that it still counts as evaluated.
        rows += [
            (number, str(doc), c, _score_text(v)) for c, (_, v) in zip(codes, scores, strict=True)
        ] or [(number, str(doc), None, None)]
    con.register("src", pl.DataFrame(rows, schema={**_ROWS, "score": pl.String}, orient="row"))


def caml_code(code: str) -> str:
    """A code as CAML writes it, read: its one trailing dot dropped (``34.`` is ``34``)."""
    stripped = code.rstrip()
    return stripped[:-1] if stripped.endswith(".") else code


def _score_text(value) -> str | None:
    """A JSON score as text for validation; ``null`` and a blank string are an empty score
    (None), as an empty cell is in every other format, not the text '""'."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return json.dumps(value)


def looks_like_gold(path: Path, name: str) -> bool:
    """True when a CSV's header (read as every CSV header is: BOM dropped, quotes honoured)
    is CAML's gold layout: it has HADM_ID and LABELS."""
    return {"HADM_ID", "LABELS"} <= {h.strip().upper() for h in text.header(path, name, ",")}


def load_gold(con: duckdb.DuckDBPyConnection, path: Path, name: str, role: str, extras) -> None:
    """Register ``src`` from a CAML gold CSV, streaming past the note text.

    ``_line`` numbers the records from 1 after the header, as for the long format.
    """
    names = long.check_header(path, name, ",")
    columns = {c.upper(): c for c in names}
    missing = [c for c in ("HADM_ID", "LABELS") if c not in columns]
    if missing:
        raise InputError(
            f"{name}: {path} lacks column(s) {missing}; CAML gold needs "
            f"SUBJECT_ID,HADM_ID,TEXT,LABELS (found {preview(names, 20)})"
        )
    rel = long.read_csv(
        con, path, names, ",", name=name, max_line_size=GOLD_MAX_LINE_SIZE, what=GOLD_WHAT
    )
    rel.select(
        duckdb.SQLExpression("row_number() OVER ()").alias("_line"),
        duckdb.ColumnExpression(columns["HADM_ID"]).alias("doc_id"),
        duckdb.ColumnExpression(columns["LABELS"]).alias("labels"),
    ).create_view("caml_gold", replace=True)
    con.sql("""
        SELECT _line, doc_id, regexp_replace(code, '\\.\\s*$', '') AS code  -- 34. is 34
        FROM (
            SELECT _line, doc_id,
                   unnest(CASE WHEN coalesce(trim(labels), '') = '' THEN [NULL]
                               ELSE string_split(labels, ';') END) AS code
            FROM caml_gold)""").create_view("src", replace=True)
