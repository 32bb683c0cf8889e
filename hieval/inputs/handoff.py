"""Normalised label tables this process has just written, kept in memory for the engine that
reads them next.

Why: the common-case normaliser (:mod:`hieval.inputs.parquet_fast`) ends with every row as a
sorted integer key over the file's sorted documents and codes; the engine's encoder
(:func:`hieval.engine.keys.encode`) then read the file back and rebuilt the same integers from
its dictionaries, once for the count and once for the error analysis (0.5 s each at 100x
MIMIC-III). Keeping the keys lets the encoder remap them instead.

A kept table is used only while the file is the one written: its inode, size and modification
time are compared on every use (a file replaced or touched since is read from disk as before).
What is kept is bounded (:data:`MAX_BYTES`, oldest entries go first) and let go when the run
that wrote it is done with it, so a notebook's many evaluations do not accumulate tables.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

#: The bytes kept at most (keys, documents and codes; the oldest tables are let go first, a
#: larger table is not kept and is read from its file as before): 100x MIMIC-III's gold and
#: predictions hold 86 MB of keys; at 1000x, 430 MB each are not kept (memory matters more
#: there than half a second). A run lets its tables go once counted (:func:`forget`).
MAX_BYTES = 256 * 2**20


@dataclass(frozen=True)
class KeptLabels:
    """A normalised table's rows: sorted distinct ``doc rank << rank_bits | code rank`` keys
    over ``docs`` (sorted distinct document ids, some possibly without rows) and ``codes``
    (sorted distinct canonical codes, likewise); ``doc_ranks`` and ``code_ranks``, when known,
    the document and code ranks the keys use (sorted)."""

    keys: np.ndarray
    docs: pl.Series
    codes: pl.Series
    rank_bits: int
    doc_ranks: np.ndarray | None = None
    code_ranks: np.ndarray | None = None

    def __post_init__(self) -> None:
        for ranks in (self.doc_ranks, self.code_ranks):
            if ranks is not None:
                ranks.flags.writeable = False  # shared by every caller, as the computed ones

    # Cached (``functools.cached_property`` writes the instance's ``__dict__``, which a frozen
    # dataclass allows): the encoder and the conventions' size check both ask, each pass over
    # the keys costs ~25 ms at 100x MIMIC-III, and the keys never change.
    @functools.cached_property
    def doc_positions(self) -> np.ndarray:
        """The document ranks the keys use (sorted)."""
        if self.doc_ranks is not None:
            return self.doc_ranks
        docs = self.keys >> self.rank_bits  # sorted: each document's keys are a run
        if docs.size > 1:
            docs = docs[np.concatenate(([True], docs[1:] != docs[:-1]))]
        docs.flags.writeable = False  # shared by every caller
        return docs

    @functools.cached_property
    def code_positions(self) -> np.ndarray:
        """The code ranks the keys use (sorted)."""
        if self.code_ranks is not None:
            return self.code_ranks
        used = np.bincount(self.keys & ((1 << self.rank_bits) - 1), minlength=self.codes.len())
        codes = np.flatnonzero(used)
        codes.flags.writeable = False  # shared by every caller
        return codes

    @property
    def nbytes(self) -> int:
        """The memory the table holds (its keys, documents and codes)."""
        ranks = sum(r.nbytes for r in (self.doc_ranks, self.code_ranks) if r is not None)
        return self.keys.nbytes + self.docs.estimated_size() + self.codes.estimated_size() + ranks


_lock = threading.Lock()
_kept: OrderedDict[str, tuple[tuple[int, int, int], KeptLabels]] = OrderedDict()


def _signature(path: str | os.PathLike) -> tuple[str, tuple[int, int, int]] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return os.path.realpath(path), (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def keep(path: str | os.PathLike, labels: KeptLabels) -> None:
    """Remember ``labels`` as the rows of the file just written at ``path``."""
    signed = _signature(path)
    if signed is None or labels.nbytes > MAX_BYTES:
        return
    name, signature = signed
    with _lock:
        for gone in [path for path in _kept if not os.path.exists(path)]:
            del _kept[gone]  # a run's folder removed (the Evaluator's chunks): nothing to read
        _kept.pop(name, None)
        _kept[name] = (signature, labels)
        while sum(entry.nbytes for _, entry in _kept.values()) > MAX_BYTES:
            _kept.popitem(last=False)


def kept(path: str | os.PathLike) -> KeptLabels | None:
    """The rows kept for ``path``, if it is still the file they were written to."""
    signed = _signature(path)
    if signed is None:
        return None
    name, signature = signed
    with _lock:
        entry = _kept.get(name)
    if entry is None or entry[0] != signature:
        return None
    return entry[1]


def forget(under: str | os.PathLike | None = None) -> None:
    """Let the tables kept for files in the folder ``under`` go (a run whose counts are
    done), or every kept table (tests)."""
    with _lock:
        if under is None:
            _kept.clear()
            return
        folder = os.path.join(os.path.realpath(under), "")
        for name in [name for name in _kept if name.startswith(folder)]:
            del _kept[name]


def distinct_values(source: str | os.PathLike | pl.DataFrame, column: str) -> pl.Series:
    """The distinct non-null values of a text ``column`` (``doc_id``, ``code``) of a label
    table: of a normalised table this process just wrote, its kept documents or codes (sorted);
    of a Parquet file, the union of its row groups' dictionaries (no string is decoded per row:
    for tables hieval wrote, whose writers, its own, DuckDB's and pyarrow's, put in a row
    group's dictionary only the values of its rows; an Arrow dictionary with unused entries,
    such as a Polars Enum's, would add those)."""
    if isinstance(source, pl.DataFrame):
        return source.get_column(column).cast(pl.String).drop_nulls().unique()
    table = kept(source)
    if table is not None and column in ("doc_id", "code"):
        if column == "doc_id":
            return table.docs.gather(table.doc_positions).alias(column)
        return table.codes.gather(table.code_positions).alias(column)
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(Path(source), read_dictionary=[column])
    found = [
        pl.Series(chunk.dictionary if hasattr(chunk, "dictionary") else chunk, dtype=pl.String)
        for group in range(parquet.num_row_groups)
        for chunk in parquet.read_row_group(group, columns=[column])[column].chunks
    ]
    if not found:
        return pl.Series(column, [], dtype=pl.String)
    return pl.concat(found).drop_nulls().unique().alias(column)


def path_of(source: object) -> Path | None:
    """``source`` as a single file's path (a path, or an object naming one), else None."""
    if isinstance(source, (str, os.PathLike)):
        return Path(os.fspath(source))
    return None
