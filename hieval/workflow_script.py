"""Run a Snakemake ``script:`` with its log file, turning user errors into one clear message.

Scripts stay thin: they read ``snakemake.input/params``, call :mod:`hieval.pipeline`, and write
outputs. This wrapper sends progress to the rule's log (and stderr), and on a
:class:`~hieval.errors.HievalError` writes the message without a traceback and exits 1.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from hieval.errors import HievalError


def run_rule(smk: Any, main: Callable[[Any, Callable[[str], None]], None]) -> None:
    """Call ``main(snakemake, log)``; ``log`` appends timestamped lines to the rule's log."""
    log_path = smk.log[0] if smk.log else None
    handle = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115
    start = time.monotonic()

    def log(message: str) -> None:
        line = f"[{time.monotonic() - start:7.1f}s] {smk.rule}: {message}"
        print(line, file=sys.stderr, flush=True)
        if handle:
            handle.write(line + "\n")
            handle.flush()

    try:
        main(smk, log)
        log("done")
    except HievalError as exc:
        log(f"error: {exc}")
        sys.exit(1)
    except Exception:
        # A bug, not a user error: keep the whole traceback in the rule's log, then fail.
        log("unexpected error (please report it):\n" + traceback.format_exc())
        raise
    finally:
        if handle:
            handle.close()
