"""A file another thread is still writing, handed on as its path.

Why: ``hieval evaluate`` normalises the gold, then each model's predictions. A prediction file
needs the gold only at the end of its own normalisation, to check its documents against the
gold's; until then the two are independent, and each keeps about one core busy. So the CLI
normalises the gold in a background thread and passes the predictions a :class:`PendingFile`:
whatever opens it (pyarrow, DuckDB, Polars all turn a path-like object into text through
``os.fspath``) waits until the gold is written, and meets the gold's own error if it failed.
Nothing can read the gold early, so the order of results is the sequential one.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from pathlib import Path


class PendingFile(os.PathLike):
    """``path``, once ``written`` (the writer's future) is done."""

    def __init__(self, path: Path, written: Future):
        self.path, self.written = path, written

    def __fspath__(self) -> str:
        self.written.result()  # waits; re-raises the writer's error
        return os.fspath(self.path)

    __str__ = __fspath__  # str() of a path is its text too (f-strings, messages)

    def ready(self) -> bool:
        """Whether the file is written (opening it would not wait)."""
        return self.written.done()

    def __repr__(self) -> str:
        state = "written" if self.written.done() else "being written"
        return f"PendingFile({str(self.path)!r}, {state})"
