"""Python's cyclic garbage collector paused around work that builds many long-lived objects.

Why: CPython starts a full collection once enough objects have survived the young ones, and a
full collection walks every object of the process. Importing a large library (numba,
matplotlib) or drawing a figure makes tens of thousands of objects that all live on, so the
collector keeps walking a heap in which nothing is garbage: after a large evaluation's imports
(Polars, DuckDB, numba) one such pass costs about 0.1 s, holding the interpreter's lock that
the reading and counting threads need. Paused around such work, the collector runs again after
it; whatever became garbage meanwhile is freed by the next collection.

The switch is process-wide. A block in the caller's own thread (a figure drawn) ends before the
call returns; a block in a background thread (an import started early) may outlive a library
call that fails first, and would leave the caller's collector off, or switch on one the caller
had switched off. So background threads pause it only in a process hieval owns: a command-line
process (:func:`own_process`, called by its entry points), never a notebook's.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from contextlib import AbstractContextManager

_owned = False  # the process is a command line's: its threads may pause the collector


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


def own_process() -> None:
    """The process is a command line's (its entry points call this): threads that may outlive
    a call pause the collector too (:func:`background_paused`)."""
    global _owned
    _owned = True


def owned() -> bool:
    """Whether :func:`own_process` was called: the process is a command line's."""
    return _owned


def background_paused() -> AbstractContextManager[None]:
    """:func:`collector_paused` for a block in a background thread, in a process hieval owns;
    nothing otherwise (see the module's docstring)."""
    return collector_paused() if _owned else contextlib.nullcontext()
