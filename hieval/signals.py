"""SIGINT and SIGTERM as exceptions, so that a stopped run cleans up before it exits.

Why: Python's default SIGTERM ends the process at once, and its KeyboardInterrupt prints a
traceback. A run stopped either way must still remove what it was writing (the staging folder
of ``--out``, the ``.NAME.XXXX.tmp`` of :func:`hieval.atomic.atomic_path`), then say in one
word what happened and exit as a shell reports a signal. Both entry points that own a process
(the CLI and the workflow's scripts) stop the same way, through :class:`StopSignals`.
"""

from __future__ import annotations

import signal
import threading


class Terminated(BaseException):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so that every
    ``finally`` runs (temporary files and staging folders are removed) before the process
    exits."""


#: What a run stopped by a signal says, and its exit code: 128 + the signal's number, as a
#: shell reports it.
STOPPED = {signal.SIGINT: ("interrupted", 130), signal.SIGTERM: ("terminated", 143)}


class StopSignals:
    """Within ``with``: the first SIGINT or SIGTERM raises KeyboardInterrupt or
    :class:`Terminated` in the main thread (later ones are ignored, so the cleanup the first
    starts is not cut short), and ``received`` records it.

    The record is what counts: a reader may turn the exception into its own (DuckDB raises
    ``RuntimeError: Query interrupted``), which must not be reported as a failure. Outside the
    main thread Python cannot install handlers, and nothing changes.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def _stop(self, signum: int, _frame) -> None:
        if self.received is None:
            self.received = signum
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._stop) for sig in STOPPED}
        return self

    def __exit__(self, *_exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def stopped(self, exc: BaseException) -> tuple[str, int] | None:
        """What to say and the exit code when ``exc`` ended the run because of a signal
        (Ctrl-C outside the handlers' reach included), else None."""
        if self.received is None and isinstance(exc, KeyboardInterrupt):
            self.received = signal.SIGINT
        return STOPPED[self.received] if self.received is not None else None
