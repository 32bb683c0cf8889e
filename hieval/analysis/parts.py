"""The error analysis of runs of documents apart, joined into the analysis of them all.

Why: :class:`hieval.Evaluator` counts its batches chunk by chunk and keeps no chunk's rows.
Its error analysis read every chunk's labels again at ``compute()`` and encoded them a second
time, one and a half seconds on the critical path at 100× MIMIC-III. Everything the analysis
derives per error is a property of the error's document alone: which errors of the other side
it meets, and where (:func:`~hieval.analysis.errors.error_rows`), and the near-miss pairs
(:func:`~hieval.analysis.confusions.pair_counts`). So each chunk keeps an :class:`ErrorPart`,
taken from the count engine's own encoding of it right after its count, and
:func:`joined_rows` and :func:`~hieval.analysis.confusions.confusion_table` make the whole
model's tables from the parts: the documents renumbered in order, the pair counts added.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import polars as pl

from hieval.analysis.confusions import pair_counts
from hieval.analysis.errors import ModelErrors, error_rows


@dataclass(frozen=True)
class ErrorPart:
    """What the error analysis keeps of a run of documents: its :func:`error_rows` (documents
    numbered within the run), its near-miss :func:`pair_counts`, its documents (``doc_ids``,
    sorted) and the distinct ``codes`` of its labels (the whole analysis's tree is built from
    every part's)."""

    rows: pl.DataFrame
    pairs: pl.DataFrame
    doc_ids: pl.Series
    codes: pl.Series


def error_part(errors: ModelErrors, codes: pl.Series) -> ErrorPart:
    """The :class:`ErrorPart` of one run's errors."""
    return ErrorPart(error_rows(errors), pair_counts(errors), errors.doc_ids, codes)


def in_document_order(parts: list[ErrorPart]) -> list[ErrorPart] | None:
    """The parts that hold documents, ordered so that their documents follow one another in
    ``doc_id`` order (as one encoding of all of them numbers them), when their documents do not
    interleave; None otherwise. Python orders text by code point, as the encoder sorts it."""
    held = [part for part in parts if part.doc_ids.len()]
    held.sort(key=lambda part: part.doc_ids[0])
    if any(a.doc_ids[-1] >= b.doc_ids[0] for a, b in itertools.pairwise(held)):
        return None
    return held


def joined_rows(parts: list[ErrorPart]) -> tuple[pl.DataFrame, pl.Series]:
    """The error rows of ``parts`` (in document order: :func:`in_document_order`) with their
    documents numbered over all of them, and those documents."""
    if len(parts) == 1:
        return parts[0].rows, parts[0].doc_ids
    rows, offset = [], 0
    for part in parts:
        rows.append(part.rows.with_columns(pl.col("doc") + offset))
        offset += part.doc_ids.len()
    return pl.concat(rows), pl.concat([part.doc_ids for part in parts])
