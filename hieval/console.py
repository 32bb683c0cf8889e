"""The ``hieval`` console script: the command line, stoppable from its first instant.

Why a module of its own: loading :mod:`hieval.cli` (Polars, DuckDB, NumPy, …) takes most of a
second, and a Ctrl-C in that second printed an import's ``KeyboardInterrupt`` traceback (a
SIGTERM ended the process without a word). Here the signals are caught before anything heavy
is imported, and a run stopped while loading ends as one stopped later does: one word,
exit 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from typing import NoReturn

from hieval.collector import own_process
from hieval.signals import StopSignals


def finish(code: int) -> NoReturn:
    """End the process with ``code`` once every exit handler has run and stdout and stderr are
    flushed, without the interpreter's teardown.

    Why: after a large evaluation the teardown frees every object of the run one by one
    (about 0.3 s at 100× MIMIC-III, a twentieth of the run) and writes nothing: each output
    is closed and renamed into place before :func:`hieval.cli.main` returns, and the exit
    handlers (logging's flush, temporary folders' clean-up) still run here, after any thread
    still working is waited for, as the interpreter itself would."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing can reach it
            stream.flush()
    os._exit(code)


def main() -> int:
    """Load the command line under :class:`StopSignals`, then run it (and :func:`finish`)."""
    stop = StopSignals()
    try:
        with stop:
            from hieval.reports import drawing

            drawing.start_early(sys.argv)  # first: the figure workers' imports overlap ours
            from hieval import cli
    except BaseException as exc:
        stopped = stop.stopped(exc)
        if stopped is None:
            raise
        what, code = stopped
        print(f"hieval: {what}", file=sys.stderr)
        return code
    loaded()
    finish(cli.main())


def loaded() -> None:
    """Called by a command-line process once its modules are imported: they live as long as
    the process, so the cyclic collector need not walk them again (``gc.freeze``). Each full
    collection of a run walked them all, about 0.05 s apiece at 100x MIMIC-III, holding the
    interpreter's lock the reading threads need; only the process's own entry points call it,
    never a library call (a notebook's objects of the moment would never be freed). Its
    background imports may then pause the collector too (:mod:`hieval.collector`).

    The objects are unfrozen at exit, before the interpreter tears its modules down: frozen,
    they are never collected, and DuckDB's bindings then report every one of its objects as
    leaked on stderr (a screenful after ``hieval --help``)."""
    gc.freeze()
    atexit.register(gc.unfreeze)
    own_process()
