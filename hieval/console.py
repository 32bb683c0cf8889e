"""The ``hieval`` console script: the command line, stoppable from its first instant.

Why a module of its own: loading :mod:`hieval.cli` (Polars, DuckDB, NumPy, …) takes most of a
second, and a Ctrl-C in that second printed an import's ``KeyboardInterrupt`` traceback (a
SIGTERM ended the process without a word). Here the signals are caught before anything heavy
is imported, and a run stopped while loading ends as one stopped later does: one word,
exit 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import sys

from hieval.signals import StopSignals


def main() -> int:
    """Load the command line under :class:`StopSignals`, then run it."""
    stop = StopSignals()
    try:
        with stop:
            from hieval import cli
    except BaseException as exc:
        stopped = stop.stopped(exc)
        if stopped is None:
            raise
        what, code = stopped
        print(f"hieval: {what}", file=sys.stderr)
        return code
    return cli.main()
