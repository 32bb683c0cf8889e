"""Normalised label tables this process has just written, kept in memory for the engine that
reads them next.

Why: the common-case normaliser (:mod:`hieval.inputs.parquet_fast`) ends with every row as a
sorted integer key over the file's sorted documents and codes; the engine's encoder
(:func:`hieval.engine.keys.encode`) then read the file back and rebuilt the same integers from
its dictionaries, once for the count and once for the error analysis (0.5 s each at 100x
MIMIC-III). Keeping the keys lets the encoder remap them instead.

A kept table is used only while the file is the one written: its inode, size and modification
time are compared on every use (a file replaced or touched since is read from disk as before).
What is kept is bounded (:data:`MAX_BYTES`, oldest entries go first), so a notebook's many
evaluations do not accumulate tables.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

#: The bytes of keys kept at most (the oldest tables are let go first; a larger table is not
#: kept, and is read from its file as before): 100x MIMIC-III's gold and predictions hold 86 MB
#: of keys; at 1000x, 430 MB each are not kept (memory matters more there than half a second).
MAX_BYTES = 256 * 2**20


@dataclass(frozen=True)
class KeptLabels:
    """A normalised table's rows: sorted distinct ``doc rank << rank_bits | code rank`` keys
    over ``docs`` (sorted distinct document ids, some possibly without rows) and ``codes``
    (sorted distinct canonical codes, likewise); ``doc_ranks``, when known, the document ranks
    the keys use (sorted)."""

    keys: np.ndarray
    docs: pl.Series
    codes: pl.Series
    rank_bits: int
    doc_ranks: np.ndarray | None = None


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
    if signed is None or labels.keys.nbytes > MAX_BYTES:
        return
    name, signature = signed
    with _lock:
        for gone in [path for path in _kept if not os.path.exists(path)]:
            del _kept[gone]  # a run's folder removed (the Evaluator's chunks): nothing to read
        _kept.pop(name, None)
        _kept[name] = (signature, labels)
        while sum(entry.keys.nbytes for _, entry in _kept.values()) > MAX_BYTES:
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


def forget() -> None:
    """Let every kept table go (tests; a caller freeing memory)."""
    with _lock:
        _kept.clear()


def path_of(source: object) -> Path | None:
    """``source`` as a single file's path (a path, or an object naming one), else None."""
    if isinstance(source, (str, os.PathLike)):
        return Path(os.fspath(source))
    return None
