"""Where a report's figures are drawn: in this process, or in worker processes beside it.

Why: matplotlib is the one part of a run that holds the interpreter's lock for long. In a
``hieval evaluate`` process its import (0.25–0.45 CPU-s) stalled the reading and counting
threads wherever it was placed, and the figures (0.3 s at 100× MIMIC-III) were drawn one after
another at the run's end with the second core idle. So a command-line ``evaluate`` starts, as
its very first step, a fork server (:mod:`multiprocessing`'s ``forkserver``) that imports
matplotlib on the core the start-up leaves idle (:func:`start_early`); the run then draws its
report's figures side by side in worker processes forked from that server (:func:`start`,
:class:`Figures`) while this process writes the rest of the page.

Every other caller (a notebook, a workflow job, the :class:`hieval.Evaluator`, a run with one
thread) draws in its own process, as before. The SVG text is the same either way
(``tests/test_drawing.py`` compares the bytes with the golden fixtures); a server or worker that
cannot start, or dies, leaves its figures to be drawn here.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import re
import secrets
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from hieval import collector

log = logging.getLogger(__name__)

#: Processes drawing at once: a report has two to four figures, the largest two about equal.
WORKERS = 2
#: What the fork server imports before it forks a worker (matplotlib's pyplot among it).
PRELOAD = "hieval.reports.figure_process"
#: The commands whose reports draw figures.
DRAWING_COMMANDS = ("evaluate",)

#: How a report's code asks for a figure: ``draw(function, *args, **kwargs)`` returns its SVG
#: text (or :class:`Figures`' placeholder for it).
Draw = Callable[..., str]

_server_started = False
_pool: ProcessPoolExecutor | None = None
_lock = threading.Lock()


def here(function: Callable[..., str], /, *args, **kwargs) -> str:
    """A figure drawn in this process, now (the default ``draw``)."""
    return function(*args, **kwargs)


def start_early(argv: list[str]) -> None:
    """Start the figure workers' fork server if ``argv`` (a command line's) will draw a report
    with more than one thread: called first thing, before the run's own imports, so that the
    server imports matplotlib while this process imports the rest on its one core."""
    global _server_started
    command = argv[1] if len(argv) > 1 else ""
    if command not in DRAWING_COMMANDS or {"-h", "--help"} & set(argv) or _one_thread(argv):
        return
    if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) < 2:
        return  # one core allowed (taskset, a SLURM job of one CPU): nothing to draw beside
    try:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_preload())
        from multiprocessing import forkserver

        forkserver.ensure_running()  # starts the server and returns: it imports meanwhile
    except (OSError, ValueError, ImportError) as error:  # no processes here: draw in-process
        log.debug("figures are drawn in this process: %s", error)
        return
    _server_started = True
    atexit.register(_end_server)


def _end_server() -> None:
    """At the process's exit: end the server, which may still be importing (after a run that
    failed early), and reap it: it does not outlive the run (holding its stderr open for
    whoever reads it to the end), and its and its workers' CPU time count as the run's own
    (``wait4``, ``time``). The resource tracker started beside it ends by itself a moment
    after the run, once no process holds its pipe. A run killed outright runs no exit
    handler: :func:`die_with_parent` covers that."""
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if pid is None:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)


def _one_thread(argv: list[str]) -> bool:
    """Whether ``argv`` asks for one thread (``--threads 1``): no second core to draw on."""
    for at, arg in enumerate(argv):
        if arg == "--threads" and argv[at + 1 : at + 2] == ["1"]:
            return True
        if arg == "--threads=1":
            return True
    return False


def _preload() -> list[str]:
    """The server's imports: the figures', and the main module when the process runs one
    (``python -m hieval.cli``): a worker runs the main module again as ``__mp_main__``
    (:mod:`multiprocessing`'s rule), at no cost when the server has imported it already."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    main = [name] if name and not name.endswith("__main__") else []
    return [PRELOAD, *main]


def start(*, threads: int) -> bool:
    """Ready the figure workers of a command-line run whose server :func:`start_early`
    started, when the run may use two threads or more; whether they are ready. The workers are
    forked when the first figure is asked for."""
    global _pool
    if not (_server_started and collector.owned()) or threads < 2:
        return False
    with _lock:
        if _pool is None:
            context = multiprocessing.get_context("forkserver")
            try:
                _pool = ProcessPoolExecutor(WORKERS, mp_context=context, initializer=_worker_start)
            except (OSError, ImportError, NotImplementedError) as error:  # no semaphores
                log.debug("figures are drawn in this process: %s", error)
                return False
    return True


def ready() -> threading.Thread | None:
    """Fork the figure workers now, each drawing a small figure first
    (:func:`hieval.reports.figures.warm`), from a thread of their own: called once the run's
    last model is counted, so that the report's figures start at once on warm workers. Forked
    on the first figure instead, the second worker started 40 ms after its figure was asked
    for, and each worker's first figure paid its warm-up. A thread, because forking through
    the server waits for it to have imported matplotlib, which a small run may reach before
    it is done; the run goes on meanwhile. Returns the thread (None without workers);
    nothing waits for it."""
    if _pool is None:
        return None
    thread = threading.Thread(target=_warm_workers, name="figure-workers", daemon=True)
    thread.start()
    return thread


def _warm_workers() -> list[Future]:
    """:func:`ready`'s work: a warm-up per worker (a failed one only leaves a figure colder)."""
    pool = _pool
    if pool is None:
        return []
    from hieval.reports import figures

    warming = []
    for _ in range(WORKERS):  # a worker is forked for each task asked while none is idle
        try:
            warming.append(pool.submit(figures.warm))
        except (BrokenProcessPool, RuntimeError) as error:  # gone, or shut down meanwhile
            _broken(error)
            break
    return warming


def stop() -> None:
    """Let the workers go (after the report, or when the run fails before it)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def _worker_start() -> None:
    """A worker leaves Ctrl-C to the run, which stops it (a worker interrupted while idle
    would print a traceback), and ends with its server (:func:`die_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()


def die_with_parent() -> None:
    """Have the kernel end this process when its parent ends (Linux's ``PR_SET_PDEATHSIG``):
    the server with the run, a worker with the server. A run killed outright (SIGKILL, out of
    memory) runs no exit handler; without this its server and workers would live on, holding
    its stderr open for whoever reads it. Elsewhere nothing (no such call)."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG


def _broken(error: BaseException) -> None:
    """The workers are gone (killed, out of memory): every later figure is drawn here."""
    log.debug("the figure workers stopped (%s); figures are drawn in this process", error)
    stop()


class Figures:
    """The figures of one report. :meth:`draw` returns a figure's SVG text, or, while a worker
    draws it, a placeholder that :meth:`resolve` replaces by that text: the page is built the
    same way either way."""

    def __init__(self) -> None:
        self._nonce = secrets.token_hex(8)  # no text of a page can pass for a placeholder
        self._pending: dict[str, tuple[Future, Callable[..., str], tuple, dict]] = {}

    def draw(self, function: Callable[..., str], /, *args, **kwargs) -> str:
        """``function(*args, **kwargs)``: a module-level figure function returning SVG text,
        drawn by a worker when there are workers."""
        pool = _pool
        if pool is None:
            return function(*args, **kwargs)
        try:
            future = pool.submit(function, *args, **kwargs)
        except (BrokenProcessPool, RuntimeError) as error:  # gone, or shut down meanwhile
            _broken(error)
            return function(*args, **kwargs)
        token = f"<!--hieval-figure-{self._nonce}-{len(self._pending)}-->"
        self._pending[token] = (future, function, args, kwargs)
        return token

    def resolve(self, text: str) -> str:
        """``text`` with each placeholder replaced by its figure (waiting for the workers)."""
        if not self._pending:
            return text
        pattern = rf"<!--hieval-figure-{self._nonce}-\d+-->"
        return re.sub(pattern, lambda match: self._svg(match.group(0)), text)

    def _svg(self, token: str) -> str:
        future, function, args, kwargs = self._pending[token]
        try:
            return future.result()  # a figure's own error is raised as if drawn here
        except BrokenProcessPool as error:
            _broken(error)
            drawn: Future = Future()
            drawn.set_result(function(*args, **kwargs))
            self._pending[token] = (drawn, function, args, kwargs)
            return drawn.result()
