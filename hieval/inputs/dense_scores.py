"""A dense score matrix kept where it is: the reference normalisation writes in place of the
long scores Parquet, and how the later stages read the matrix through it.

Why: a dense ``.npy`` (MIMIC-IV ICD-10: 19,802 x 7,900 = 157M scores) written out as long
``doc_id, code, score`` rows costs minutes and tens of GB (issue 36), yet every stage that
needs the scores can read the matrix itself in blocks of documents. So normalisation writes,
at the scores path, an empty ``doc_id, code, score`` table whose Parquet metadata names the
``.npy``, its sha256, each row's document and each column's code as normalisation settled
them (None where the unknown-document or unknown-code policy dropped them): a few hundred KB
instead of the scores. Before the matrix is read again its sha256 is checked, so a file changed
since normalisation is refused, never silently read.

A stage that has no blocked computation asks :func:`read_scores` for the long table, which
builds it from the matrix (today's memory, without DuckDB).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import polars as pl

from hieval import paths
from hieval.atomic import atomic_path
from hieval.errors import InputError

#: The Parquet metadata key of a dense scores reference.
DENSE_KEY = "hieval.dense_scores"

#: The long scores table's columns (a reference holds none of its rows).
SCHEMA = {"doc_id": pl.String, "code": pl.String, "score": pl.Float64}


@dataclass(frozen=True)
class DenseScores:
    """A normalised model's scores, as a matrix on disk: ``path`` (a ``.npy``, or ``.npz``
    whose ``key`` array holds the matrix) with ``sha256``; ``docs[i]`` is row i's document and
    ``codes[j]`` column j's canonical code (None: dropped by normalisation's policies);
    ``counted`` the scored codes ranking must not place (code -> status, as
    :mod:`hieval.inputs.counted` marks them in a long scores file); ``unscored`` the kept
    cells without a score (``-inf``: a long file that scores most pairs but not all,
    :mod:`hieval.inputs.dense_long`)."""

    path: str
    sha256: str
    docs: list[str | None]
    codes: list[str | None]
    counted: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    unscored: int = 0

    @property
    def scored_pairs(self) -> int:
        """The (document, code) pairs kept for ranking: kept rows x kept columns, less the
        unscored cells."""
        rows = sum(d is not None for d in self.docs)
        return rows * sum(c is not None for c in self.codes) - self.unscored

    def to_json(self) -> str:
        fields = dict(self.__dict__)
        if not fields["unscored"]:
            del fields["unscored"]  # a full matrix's reference as before
        return json.dumps(fields, sort_keys=True)

    def matrix(self) -> np.ndarray:
        """The matrix, memory mapped (``.npy``), after checking it is the file normalisation
        read (its sha256)."""
        path = Path(self.path)
        if not path.is_file() or _sha256(path) != self.sha256:
            raise InputError(
                f"{path} changed (or went) since its scores were normalised (sha256 "
                f"{self.sha256[:12]}...); its ranking rows would not be the scores the decisions "
                "came from: run the evaluation again"
            )
        if self.key is None:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        with np.load(path, allow_pickle=False) as archive:
            return archive[self.key]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def write_reference(out: str | Path, scores: DenseScores) -> None:
    """Write ``scores``' reference at ``out`` (an empty scores table with the reference in
    its metadata). A matrix without a kept cell (no row on a gold document, or every column
    dropped) is written as what the long path writes for it, an empty scores table without a
    reference: no stage may then score its all-unscored pairs (the model has hard
    predictions only, on every path)."""
    import pyarrow.parquet as pq

    table = pl.DataFrame(schema=SCHEMA).to_arrow()
    if scores.scored_pairs:
        table = table.replace_schema_metadata({DENSE_KEY: scores.to_json()})
    with atomic_path(out) as tmp:
        pq.write_table(table, tmp)


def read_reference(path: str | Path) -> DenseScores | None:
    """The dense reference written at ``path``, or None for a long scores file."""
    found = paths.read_parquet_metadata(path).get(DENSE_KEY)
    if found is None:
        return None
    scores = DenseScores(**json.loads(found))
    if not Path(scores.path).is_absolute():  # a copy hieval made beside the reference (a
        # wide table's score columns): found there, wherever the out folder has moved
        scores = replace(scores, path=str(Path(path).resolve().parent / scores.path))
    return scores


def read_scores(path: str | Path) -> pl.DataFrame:
    """The long scores table ``doc_id, code, score`` (sorted by doc_id, code) of a scores
    file, built from the matrix where ``path`` is a dense reference: for the stages without a
    blocked computation (tuning, bootstrap, conventions), at today's memory."""
    scores = read_reference(path)
    if scores is None:
        return paths.read_parquet(path)
    return long_frame(scores)


def long_frame(scores: DenseScores) -> pl.DataFrame:
    """The kept cells of a dense reference as long rows (scores as float64), its unscored
    cells left out (the long path has no row for them)."""
    matrix = scores.matrix()
    rows = np.flatnonzero([d is not None for d in scores.docs])
    cols = np.flatnonzero([c is not None for c in scores.codes])
    cells = np.asarray(matrix[rows][:, cols], dtype=np.float64)
    docs = np.array([scores.docs[i] for i in rows], dtype=object)
    codes = np.array([scores.codes[j] for j in cols], dtype=object)
    frame = pl.DataFrame(
        {
            "doc_id": pl.Series(np.repeat(docs, len(cols)).tolist(), dtype=pl.String),
            "code": pl.Series(np.tile(codes, len(rows)).tolist(), dtype=pl.String),
            "score": cells.ravel(),
        }
    )
    if scores.unscored:
        frame = frame.filter(pl.col("score") != -np.inf)
    return frame.sort("doc_id", "code")


class RowView:
    """Rows ``rows`` (and columns ``cols``, all when None) of ``matrix``, in that order, as the
    blocked functions read a matrix: ``shape``, ``dtype``, ``size``, ``ndim`` and row slices
    (each slice read from the memory map as it is asked for)."""

    def __init__(self, matrix: np.ndarray, rows: np.ndarray, cols: np.ndarray | None) -> None:
        self._matrix, self._rows, self._cols = matrix, np.asarray(rows, dtype=np.int64), cols
        width = matrix.shape[1] if cols is None else len(cols)
        self.shape = (len(self._rows), width)
        self.dtype = matrix.dtype
        self.size = self.shape[0] * self.shape[1]
        self.ndim = 2
        n = len(self._rows)
        self._contiguous = n == 0 or bool(
            np.array_equal(self._rows, np.arange(self._rows[0], self._rows[0] + n))
        )

    def __getitem__(self, rows: slice) -> np.ndarray:
        if self._contiguous:
            first = int(self._rows[0]) if len(self._rows) else 0
            start, stop, _ = rows.indices(self.shape[0])
            block = np.asarray(self._matrix[first + start : first + stop])
        else:  # a memory map reads the listed rows, in the listed order
            block = np.asarray(self._matrix[self._rows[rows]])
        return block if self._cols is None else block[:, self._cols]
