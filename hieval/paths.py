"""Paths are literal: what a user names is the one file read, whatever characters it holds.

DuckDB's readers (``read_csv``, ``read_parquet``) expand ``* ? [ ]`` as glob patterns and ``~``
as the home folder; Polars' readers glob unless told not to, and expand ``~`` whatever they are
told. A file named ``pred[1].csv``
would then silently read ``pred1.csv``. Every path hieval hands to a reader goes through here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import polars as pl

_GLOB = re.compile(r"([\[\]*?])")


def duckdb_path(path: str | os.PathLike) -> str:
    """``path`` as a DuckDB reader argument that matches exactly that one file.

    The path is made absolute (so a leading ``~`` is a folder name, not the home folder) and
    each glob character is escaped as a one-character class (``[`` → ``[[]``), which DuckDB's
    glob matches literally.
    """
    return _GLOB.sub(r"[\1]", os.path.abspath(os.fspath(path)))


def _polars_path(path: str | os.PathLike) -> Path:
    """``path`` as Polars must be given it to read that one file: absolute, so that a leading
    ``~`` is a folder of that name (Polars would read the home folder's file instead)."""
    return Path(os.path.abspath(os.fspath(path)))


def read_parquet(path: str | os.PathLike, **options) -> pl.DataFrame:
    """Polars' ``read_parquet`` of exactly ``path`` (no glob or ``~`` expansion)."""
    return pl.read_parquet(_polars_path(path), glob=False, **options)


def scan_parquet(path: str | os.PathLike, **options) -> pl.LazyFrame:
    """Polars' ``scan_parquet`` of exactly ``path`` (no glob or ``~`` expansion)."""
    return pl.scan_parquet(_polars_path(path), glob=False, **options)


def read_csv(path: str | os.PathLike, **options) -> pl.DataFrame:
    """Polars' ``read_csv`` of exactly ``path`` (no glob or ``~`` expansion)."""
    return pl.read_csv(_polars_path(path), glob=False, **options)


def read_parquet_metadata(path: str | os.PathLike) -> dict[str, str]:
    """Polars' ``read_parquet_metadata`` of exactly ``path`` (no ``~`` expansion)."""
    return pl.read_parquet_metadata(_polars_path(path))
