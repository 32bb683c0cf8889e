"""Normalise a dense score matrix (a floating ``.npy`` with its code and document lists) by its
lists and its decided cells, never by its every cell (issue 36).

Why: today's general path (:func:`hieval.inputs.normalize._normalize_in_duckdb`) expands the
matrix to one long row of text keys per cell and groups, maps, selects and sorts them all: at
MIMIC-IV's 157M scores that is minutes and tens of GB. But a matrix's codes and documents are
its two lists: the code list is read as codes once (canonical codes, malformed and repeated
codes refused, as today, naming the list's line), every cell is only checked to be finite, a
block of documents at a time, and the threshold / top-k decide per block
(:mod:`hieval.inputs.dense_decisions`). The decided cells, about the gold's size, then go
through today's steps in DuckDB (unknown codes and documents, counts, the sorted labels), so
the labels and the record are today's; the record's counts over all cells (rows, cells below
the threshold or outside the top k, scored pairs) come from the blocks. The scores Parquet is
not written: its place holds a reference to the matrix (:mod:`hieval.inputs.dense_scores`).

``HIEVAL_DENSE_LONG=1`` in the environment sends every matrix down today's general path (the
tests compare the two paths' outputs bit for bit).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa

from hieval.errors import InputError, preview_value
from hieval.inputs import dense_long, dense_scores, dense_wide
from hieval.inputs.counted import INVALID, UNKNOWN
from hieval.inputs.dense_decisions import (
    BLOCK_DOCS,
    UNSCORED,
    Decided,
    NonFiniteCell,
    decided_pairs,
)
from hieval.inputs.dense_scores import DenseScores, write_reference
from hieval.inputs.detect import LabelFile
from hieval.inputs.formats import FORMATS, Extras, dense
from hieval.inputs.formats.repeats import check_cell_repeats
from hieval.inputs.job import LabelJob
from hieval.inputs.options import COUNT, LENIENT
from hieval.inputs.record import InputRecord

log = logging.getLogger(__name__)

#: The environment variable that forces today's general path (for the equality tests).
LONG_PATH_VARIABLE = "HIEVAL_DENSE_LONG"
#: Formats whose scores are copied into a ``.npy`` beside the reference, and which go the long
#: way when the blocks refuse them (that path's messages and record are the ones to give).
COPIED = ("wide", "long")


def blocked_matrix(file: LabelFile, job: LabelJob) -> dense.ScoreMatrix | None:
    """The score matrix to normalise by blocks, or None where today's path reads the file:
    not a dense file, a gold, no scores path to keep the reference at, an ``.npz`` or
    integer cells, or the long path forced."""
    if os.environ.get(LONG_PATH_VARIABLE) == "1" or job.is_gold or job.scores_out is None:
        return None
    out = Path(job.scores_out)
    copy = out.with_name(f"{out.stem}.matrix.npy")
    if file.format == "wide":  # its score columns, copied by blocks beside the reference
        return dense_wide.score_matrix(file.path, out=copy, name=file.name)
    if file.format == "long":  # every code scored for every document: pivoted by batches
        return dense_long.score_matrix(file.path, out=copy, duckdb_config=job.duckdb_config)
    if file.format != "dense":
        return None
    extras = Extras(code_list=job.options.code_list, doc_list=job.options.doc_list)
    if _copied(file):  # its member decompressed by blocks of rows beside the reference
        return dense.npz_score_matrix(file.path, file.name, extras, out=copy)
    return dense.score_matrix(file.path, file.name, extras)


def _copied(file: LabelFile) -> bool:
    """Whether the blocks read a copy of ``file``'s scores (a wide table, a long file, an
    ``.npz``): a copy the blocks refuse goes the long way, whose messages are the ones to give."""
    return file.format in COPIED or file.path.suffix.lower() == ".npz"


def normalize_dense(file: LabelFile, job: LabelJob, scores: dense.ScoreMatrix) -> InputRecord:
    """Normalise the score matrix ``scores`` of ``file`` as ``job`` says (see the module). A
    wide table refused here goes the long way, which refuses it in its own words (or reads
    what the blocks would not: the messages and the record are the long path's)."""
    from hieval.inputs import normalize as steps  # its steps; it imports this module lazily

    if not _copied(file):
        return _normalize_blocked(file, job, scores)
    try:
        return _normalize_blocked(file, job, scores)
    except InputError:
        Path(scores.matrix.filename).unlink(missing_ok=True)
        return steps._normalize_in_duckdb(file, job)


def _normalize_blocked(file: LabelFile, job: LabelJob, scores: dense.ScoreMatrix) -> InputRecord:
    from hieval.inputs import normalize as steps

    if job.gold_docs is not None:  # a gold still being written: wait for it
        job = replace(job, gold_docs=Path(job.gold_docs))
    record = InputRecord(
        name=file.name, path=str(file.path), sha256=file.sha256, format=file.format,
        unknown_code_policy=job.unknown_codes, code_system=job.system.name,
        malformed_code_policy=job.malformed_codes,
    )  # fmt: skip
    con = duckdb.connect(config=job.duckdb_config or {})
    dense.register_lists(con, scores)
    mapping = _code_mapping(con, file, job, scores, record)
    canonical = dict(zip(mapping["raw"], mapping["code"], strict=True))
    column_codes = [canonical[c] for c in scores.codes]
    decided = _decide(file, job, scores, column_codes)
    src = steps._Source(con, file, file.format, ["doc_id", "code", "score"], True, False)
    _register_decided(con, scores, decided, own_rows=file.format != "long")
    empty = steps._read_labels(src, record, is_gold=False)
    steps._apply_mapping(con, mapping, has_type=False)
    check_cell_repeats(
        con, mapping, FORMATS[file.format], role=job.role, has_score=True, path=file.path,
        name=file.name,
    )  # fmt: skip
    steps._select_by_score(con, record, job.options, job.default_threshold, job.tuned)
    steps._count_duplicates(con, record, file.name)
    steps._apply_unknown_codes(con, record, job, file.path, file.name)
    if job.gold_docs is not None:
        steps._apply_unknown_docs(
            con, record, job.gold_docs, job.unknown_docs, file.path, file.name
        )
    steps._count_labels(src, record, is_gold=False)
    steps._write_labels(src, record, job, empty=empty, grouped=False)
    n_docs, width = scores.matrix.shape
    record.rows = n_docs * width + n_docs  # every cell and each document's own row
    if file.format == "long":
        record.rows = n_docs * width - scores.unscored  # a row per scored cell, none of its own
    record.below_threshold, record.outside_top_k = decided.below_threshold, decided.outside_top_k
    reference = _reference(file, job, scores, column_codes, record)
    record.scored_pairs = reference.scored_pairs
    write_reference(job.scores_out, reference)
    log.info("%s: %d scores kept for ranking (in %s)", file.name, record.scored_pairs, file.path)
    log.info("%s", record.summary())
    return record


def _code_mapping(
    con, file: LabelFile, job: LabelJob, scores: dense.ScoreMatrix, record: InputRecord
) -> pl.DataFrame:
    """Each listed code read as a code, once (``raw``, ``raw_type``, ``code``, ``kind``), as
    :func:`hieval.inputs.normalize._read_codes` reads a file's distinct codes: the same code
    format (auto: dotted when any code has a dot), the same refusals naming the list's lines;
    two columns that read as one code are refused here, whichever cells are decided."""
    from hieval.inputs import normalize as steps

    raw = pl.DataFrame(
        {"code": sorted(set(scores.codes)) if scores.docs else [], "code_type": None},
        schema={"code": pl.String, "code_type": pl.String},
    )
    fmt = job.options.code_format
    lenient = fmt == LENIENT
    if lenient:
        read = raw["code"].map_elements(steps.lenient_code, return_dtype=pl.String)
        record.codes_read_leniently = int((read != raw["code"]).sum())
        fmt = "dotted" if read.str.contains(".", literal=True).any() else "undotted"
    elif fmt == "auto":
        fmt = "dotted" if raw["code"].str.contains(".", literal=True).any() else "undotted"
    record.code_format = f"{LENIENT} {fmt}" if lenient else fmt
    mapping = steps._map_codes(
        raw, fmt, job, where=lambda lines: dense.code_places(con, lines), path=file.path,
        name=file.name, rows=lambda: dense.code_rows(con), lenient=lenient,
    )  # fmt: skip
    invalid = mapping.filter(pl.col("kind") == steps.INVALID_KIND)["code"].unique().sort()
    record.invalid_codes = dict.fromkeys(invalid.to_list(), 0)
    check_cell_repeats(
        con, mapping, FORMATS[file.format], role=job.role, has_score=False, path=file.path,
        name=file.name,
    )  # fmt: skip
    return mapping


def _decide(
    file: LabelFile, job: LabelJob, scores: dense.ScoreMatrix, column_codes: list[str]
) -> Decided:
    """The decided cells, as ``_select_by_score`` decides them: the tuned thresholds (per code
    where tuned so), else the threshold (the default when neither it nor top-k is given),
    then each document's top k, ties by code; a non-finite cell is refused by name."""
    options, tuned = job.options, job.tuned
    threshold = options.threshold
    if threshold is None and options.top_k is None:
        threshold = job.default_threshold
    per_code = None
    if tuned is not None:
        threshold = tuned.threshold
        per_code = np.array([tuned.per_code.get(c, np.nan) for c in column_codes], np.float64)
    code_order = np.argsort(np.argsort(np.array(column_codes, dtype=object), kind="stable"))
    try:
        return decided_pairs(
            scores.matrix, threshold=threshold, code_thresholds=per_code, top_k=options.top_k,
            code_order=code_order, unscored=scores.unscored > 0,
        )  # fmt: skip
    except NonFiniteCell as cell:
        raise InputError(
            f"{file.name}: {file.path}, row {cell.row + 1} (document "
            f"{preview_value(scores.docs[cell.row])}), column {cell.col + 1} (code "
            f"{preview_value(scores.codes[cell.col])}): score {preview_value(str(cell.value))} is "
            "not a finite "
            "number; fix or remove it"
        ) from None


def _register_decided(con, scores: dense.ScoreMatrix, decided: Decided, *, own_rows: bool) -> None:
    """``src``: the decided cells (``doc_id, code, score``, as listed) and, with ``own_rows``,
    each document's own row (a document without a decided code still counts). A long file
    has no such row: there, as on the long path, a document none of whose scores is decided
    is not one of the predictions' documents."""
    docs = np.array(scores.docs, dtype=object)
    codes = np.array(scores.codes, dtype=object)
    values = np.asarray(scores.matrix[decided.rows, decided.cols], dtype=np.float64)
    n_docs = len(scores.docs) if own_rows else 0
    cells = pa.table(
        {
            "doc_id": pa.array(
                [*docs[decided.rows].tolist(), *scores.docs[:n_docs]], type=pa.string()
            ),
            "code": pa.array([*codes[decided.cols].tolist(), *([None] * n_docs)], type=pa.string()),
            "score": pa.array(
                np.concatenate([values, np.full(n_docs, np.nan)]),
                mask=np.r_[np.zeros(len(values), bool), np.ones(n_docs, bool)],
            ),
            "_line": np.concatenate([decided.rows, np.arange(n_docs)]) + 1,
        }
    )
    con.register("dense_cells", cells)
    con.sql("SELECT * FROM dense_cells").create_view("src", replace=True)


def _reference(
    file: LabelFile, job: LabelJob, scores: dense.ScoreMatrix, column_codes: list[str],
    record: InputRecord,
) -> DenseScores:  # fmt: skip
    """What ranking reads instead of the long scores: as ``_write_scores`` keeps them, the
    documents the gold lacks are dropped, and the codes the hierarchy lacks under
    ``unknown_codes: drop``; the counted codes as ``_counted_scores`` marks them."""
    gold_docs = gold_codes = None
    if job.gold_docs is not None:
        gold = pl.read_parquet(job.gold_docs, columns=["doc_id", "code"])
        gold_docs = set(gold["doc_id"].to_list())
        gold_codes = set(gold["code"].drop_nulls().to_list())
    docs = [d if gold_docs is None or d in gold_docs else None for d in scores.docs]
    known = set(job.hierarchy.frame["code"].to_list())
    drop = record.unknown_code_policy == "drop"
    codes = [None if drop and c not in known else c for c in column_codes]
    counted = {c: INVALID if c in record.invalid_codes else UNKNOWN for c in record.counted_codes}
    if record.unknown_code_policy == COUNT:
        unplaced = {c for c in codes if c is not None} - known - (gold_codes or set())
        counted = dict.fromkeys(sorted(unplaced), UNKNOWN) | counted
    path, sha256 = file.path.resolve(), file.sha256
    if _copied(file):  # the copy of its scores beside the reference
        path = Path(scores.matrix.filename)
        path, sha256 = Path(path.name), dense_scores._sha256(path)
    unscored = _kept_unscored(scores, docs, codes) if scores.unscored else 0
    return DenseScores(
        path=str(path), sha256=sha256, docs=docs, codes=codes, counted=counted, unscored=unscored
    )  # fmt: skip


def _kept_unscored(scores: dense.ScoreMatrix, docs: list, codes: list) -> int:
    """The unscored cells (``-inf``) of the kept rows and columns, a block of rows at a time:
    the reference's scored pairs are its kept cells less these."""
    rows = np.flatnonzero([d is not None for d in docs])
    cols = np.flatnonzero([c is not None for c in codes])
    found = 0
    for start in range(0, len(rows), BLOCK_DOCS):
        block = np.asarray(scores.matrix[rows[start : start + BLOCK_DOCS]])[:, cols]
        found += int(np.count_nonzero(block == UNSCORED))
    return found
