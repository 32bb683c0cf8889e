"""Labels held in memory, handed to the readers as files: the Python API's inputs take the same
validation and normalisation as a user's file, because they *are* read as files.

A DataFrame becomes a Parquet file, a mapping a long table, a dense matrix a ``.npy`` with its
code and document lists, each in a private folder the caller owns (and removes). The readers
then say "row 2" of a file the user never saw; :class:`Staged` keeps what is needed to say
"document 'a'" of model ``m`` instead (:func:`reword`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from hieval.errors import InputError, preview_value

#: The input kinds :func:`stage` takes, in the words of its messages.
KINDS = (
    "a path, a Polars or pandas DataFrame, a mapping doc_id -> codes or -> {code: score}, "
    "or hieval.dense(...)"
)


@dataclass(frozen=True, eq=False)
class Dense:
    """A documents x codes matrix (scores, or 0/1 decisions) with its codes and documents: what
    :func:`dense` returns, read as the ``dense`` file format reads a ``.npy`` and its lists."""

    matrix: np.ndarray
    codes: tuple[str, ...]
    doc_ids: tuple[str, ...]


def dense(scores: object, *, codes: Sequence[str], doc_ids: Sequence[str]) -> Dense:
    """A dense score matrix as a model's predictions (or 0/1 decisions as a gold).

    Parameters
    ----------
    scores
        A 2-D numpy array, or a scipy.sparse matrix or array (made dense first, so that every
        cell is a score, as in a ``.npy`` file: its memory is documents x codes x 8 bytes),
        one row per document and one column per code.
    codes
        The code of each column, as strings (``"401.9"``).
    doc_ids
        The document of each row, as strings.

    Returns
    -------
    Dense
        Pass it where :func:`hieval.evaluate` takes predictions (or gold).

    Examples
    --------
    >>> import numpy as np, hieval
    >>> d = hieval.dense(np.array([[0.9, 0.2]]), codes=["401.9", "428.0"], doc_ids=["a"])
    >>> d.matrix.shape
    (1, 2)
    """
    if hasattr(scores, "toarray"):  # scipy.sparse: every cell a score, as in a .npy file
        scores = scores.toarray()
    return Dense(np.asarray(scores), _entries(codes, "codes"), _entries(doc_ids, "doc_ids"))


def _entries(values: Sequence[str], what: str) -> tuple[str, ...]:
    """The codes or documents of a dense matrix: strings, one per line of the list file."""
    if isinstance(values, str):
        raise InputError(f"hieval.dense: {what} must be a sequence of strings, not one string")
    entries = tuple(values)
    for value in entries:
        if not isinstance(value, str) or "\n" in value or "\r" in value:
            raise InputError(
                f"hieval.dense: {what} entry {preview_value(value)} must be a string without "
                "line breaks (codes and documents are text: '401.9', not 401.9)"
            )
    return entries


@dataclass
class Staged:
    """One in-memory input written as a file: ``path`` the readers take, and how a message
    names it (``what``) and its rows (``doc_of_row``: the document of each 1-based row)."""

    path: Path
    what: str
    doc_of_row: pl.Series | None = None
    lists: dict[Path, str] = field(default_factory=dict)
    format: str | None = None


def stage(value: object, *, name: str, role: str, folder: Path) -> Path | Staged:
    """``value`` as a file the readers take: a path is used as it is (literally, never as a
    glob); anything else is written into ``folder`` (which the caller owns) as a file of the
    format that keeps every value as given. ``name`` names the input in messages."""
    if isinstance(value, str | os.PathLike):
        return Path(value)
    what = f"{name} (in memory)"
    target = folder / f"{len(list(folder.iterdir()))}.parquet"
    if isinstance(value, Dense):
        return _stage_dense(value, what=what, target=target)
    frame = _frame(value, name=name, role=role)
    frame.write_parquet(target)
    doc_of_row = frame["doc_id"] if "doc_id" in frame.columns else None
    return Staged(target, what, doc_of_row)


def _frame(value: object, *, name: str, role: str) -> pl.DataFrame:
    """A Polars frame of ``value``: a DataFrame as it is (columns and types kept, so that the
    readers judge them as in a Parquet file), a mapping as long rows."""
    if isinstance(value, pl.LazyFrame):
        return value.collect()
    if isinstance(value, pl.DataFrame):
        return value
    if type(value).__module__.startswith("pandas"):
        if hasattr(value, "columns") and "doc_id" not in value.columns:
            value = value.reset_index()  # doc_id kept as the index
        return pl.from_pandas(value)
    if isinstance(value, Mapping):
        return _long(value, name=name, role=role)
    raise InputError(f"{name}: got {type(value).__name__}; give {KINDS}")


def _long(labels: Mapping, *, name: str, role: str) -> pl.DataFrame:
    """Long rows of ``doc_id -> codes`` or ``doc_id -> {code: score}``; a document with no
    codes becomes a row with an empty code, which declares it (as in a file)."""
    docs: list[object] = []
    codes: list[object] = []
    scores: list[object] = []
    scored = any(isinstance(v, Mapping) for v in labels.values())
    for doc, value in labels.items():
        if scored != isinstance(value, Mapping):
            raise InputError(
                f"{name}: document {preview_value(doc)}: every document must map to codes, or "
                "every document to {code: score}; this one differs from the others"
            )
        pairs = _pairs(value, name=name, doc=doc, scored=scored)
        if not pairs:
            pairs = [(None, None)]
        for code, score in pairs:
            docs.append(doc)
            codes.append(code)
            scores.append(score)
    columns = {"doc_id": docs, "code": codes}
    if scored:
        columns["score"] = scores
    try:
        frame = pl.DataFrame(columns, strict=True)
    except (TypeError, pl.exceptions.PolarsError):
        return _mixed_types(columns, name=name)
    # No value to infer a type from (no document, or only documents without codes): the
    # columns are still text (and scores numbers), as in a file that holds such rows.
    return frame.cast(
        {
            c: pl.Float64 if c == "score" else pl.String
            for c, t in frame.schema.items()
            if t == pl.Null
        }
    )


def _pairs(value: object, *, name: str, doc: object, scored: bool) -> list[tuple]:
    if scored:
        return list(value.items())
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InputError(
            f"{name}: document {preview_value(doc)} maps to {preview_value(value)}; give an "
            "iterable of codes (['401.9']), not a single value"
        )
    return [(code, None) for code in value]


def _mixed_types(columns: dict[str, list], *, name: str) -> pl.DataFrame:
    """The message for a column whose values are not all of one type (a number among codes)."""
    for column, values in columns.items():
        kinds = {type(v).__name__ for v in values if v is not None}
        if len(kinds) > 1:
            odd = next(v for v in values if v is not None and type(v).__name__ != "str")
            doc = columns["doc_id"][values.index(odd)]
            raise InputError(
                f"{name}: document {preview_value(doc)}: {column} {odd!r} "
                f"({type(odd).__name__}) among text; codes and documents are strings "
                "('401.9', not 401.9: leading zeros matter)"
            ) from None
    raise InputError(f"{name}: the labels cannot be made a table; give {KINDS}")


def _stage_dense(value: Dense, *, what: str, target: Path) -> Staged:
    matrix = target.with_suffix(".npy")
    np.save(matrix, value.matrix, allow_pickle=False)
    lists = {}
    for suffix, entries, said in (
        (".codes.txt", value.codes, "its codes"),
        (".docs.txt", value.doc_ids, "its doc_ids"),
    ):
        path = target.with_suffix(suffix)
        path.write_text("".join(f"{e}\n" for e in entries), "utf-8")
        lists[path] = f"{what}, {said}"
    return Staged(matrix, what, pl.Series("doc_id", value.doc_ids), lists, format="dense")


def reword(message: str, staged: Iterable[Staged]) -> str:
    """A reader's message about a staged file in the user's terms: ``FILE, row N`` becomes the
    document of row N, the file itself the input's name (``m (in memory)``)."""
    for item in staged:
        for path, said in item.lists.items():
            message = message.replace(str(path), said)
        if item.doc_of_row is not None:
            rows = item.doc_of_row

            def document(match: re.Match, rows: pl.Series = rows) -> str:
                row = int(match.group(1))
                if not 1 <= row <= rows.len():
                    return match.group(0)
                return f"document {preview_value(rows[row - 1])}"

            where = re.escape(str(item.path)) + r", (?:row|line) (\d+)"
            message = re.sub(where, lambda m, what=item.what: f"{what}, {document(m)}", message)
        message = message.replace(str(item.path), item.what)
    return message
