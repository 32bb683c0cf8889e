"""Python's cyclic garbage collector paused around work that builds many long-lived objects.

Why: CPython starts a full collection once enough objects have survived the young ones, and a
full collection walks every object of the process. Importing a large library (numba,
matplotlib) or drawing a figure makes tens of thousands of objects that all live on, so the
collector keeps walking a heap in which nothing is garbage: after a large evaluation's imports
(Polars, DuckDB, numba) one such pass costs about 0.1 s, holding the interpreter's lock that
the reading and counting threads need. Paused around such work, the collector runs again after
it; whatever became garbage meanwhile is freed by the next collection.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off inside the block (a context manager, or a decorator:
    ``@collector_paused()``), on again after it, also when the block raises. A collector
    already disabled (by the user, or by an enclosing block in another thread) is left so: the
    block that disabled it enables it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
