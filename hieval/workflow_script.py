"""Run a Snakemake ``script:`` with its log file, turning user errors into one clear message.

Scripts stay thin: they read ``snakemake.input/params`` and make one call into
:mod:`hieval.pipeline` per stage. This wrapper configures the library's ``logging`` once — each
line timestamped with the job's elapsed time and the rule's name, to the rule's log file and to
stderr — and on a :class:`~hieval.errors.HievalError` writes the message without a traceback
and exits 1. A job stopped by SIGTERM (Snakemake cancelling it, a cluster's time limit) or
SIGINT removes the temporary files it was writing, logs "terminated" (or "interrupted") and
exits 143 (130), as the CLI does.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from hieval import hints
from hieval.errors import HievalError
from hieval.signals import StopSignals

log = logging.getLogger("hieval.workflow")


class _Elapsed(logging.Formatter):
    """``[   1.2s] rule: message``: where in the job a line was written, and by which rule."""

    def __init__(self, rule: str) -> None:
        super().__init__()
        self.rule, self.start = rule, time.monotonic()

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return f"[{time.monotonic() - self.start:7.1f}s] {self.rule}: {message}"


def configure_logging(rule: str, log_path: str | None) -> list[logging.Handler]:
    """Send the ``hieval`` loggers' INFO lines to stderr and, when given, the rule's log file."""
    formatter = _Elapsed(rule)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        handlers.append(logging.FileHandler(log_path, encoding="utf-8"))
    root = logging.getLogger("hieval")
    root.setLevel(logging.INFO)
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    return handlers


def run_rule(smk: Any, main: Callable[[Any], None]) -> None:
    """Call ``main(snakemake)`` with logging configured for the rule; in a job's own process,
    end it once ``main`` has returned (:func:`_end_job`)."""
    handlers = configure_logging(smk.rule, smk.log[0] if smk.log else None)
    stop = StopSignals()
    try:
        with stop, hints.entry_point(hints.WORKFLOW):
            main(smk)
        log.info("done")
    except BaseException as exc:
        _exit_on(exc, stop)
        raise
    finally:
        for handler in handlers:
            handler.close()
            logging.getLogger("hieval").removeHandler(handler)
    _end_job(smk)


def _end_job(smk: Any) -> None:
    """End the process of a job whose script has returned, without the interpreter's
    teardown (:func:`hieval.console.finish`: exit handlers, threads and stdio still done).

    Why: Snakemake runs each ``script:`` job in an interpreter of its own, which ends with the
    script (nothing of Snakemake's runs after it there), and the teardown of one that loaded
    Polars, DuckDB and numba took about 0.3 s: a second or more of every small workflow.
    Only in such a process: ``smk`` is Snakemake's own object there (a test calling a rule
    in its own process passes another)."""
    kind = type(smk)
    if kind.__name__ == "Snakemake" and kind.__module__.startswith("snakemake."):
        from hieval.console import finish

        finish(0)


def _exit_on(exc: BaseException, stop: StopSignals) -> None:
    """Exit with one line for a signal or a user error; log a bug's traceback (the caller
    raises it again, so that the job fails)."""
    stopped = stop.stopped(exc)
    if stopped is not None:
        what, code = stopped
        log.error("%s", what)
        sys.exit(code)
    if isinstance(exc, HievalError):
        log.error("error: %s", exc)
        sys.exit(1)
    if isinstance(exc, Exception):
        # A bug, not a user error: keep the whole traceback in the rule's log, then fail.
        log.error("unexpected error (please report it):\n%s", traceback.format_exc())
