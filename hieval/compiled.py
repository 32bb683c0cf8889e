"""numba's ``njit`` as every compiled loop of hieval uses it: one place for the flags.

Why: the compiled loops (the bootstrap's state and exact row sums, LCA-F's per-document sums,
the dense path's pooling, column counts and calibration sums) run on threads beside each other,
so they release the GIL; their machine code is cached on disk where numba finds a writable
folder (beside the module, else the user's cache). Where none is (a read-only install without
a home folder) numba refuses ``cache=True`` at decoration, and the loop is compiled in each
process instead (under a second, once). numba is imported by the modules that call this,
only when they are imported.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable
from typing import Any

from numba import njit

from hieval import collector

#: The package numba imports to see whether BLAS is there (see :func:`_without_blas_check`).
_BLAS_PACKAGE = "scipy.linalg"


def compiled(function: Callable, **flags: Any) -> Callable:
    """``function`` compiled without the GIL, cached on disk where numba can; ``flags`` are
    passed on to ``njit`` (e.g. ``fastmath``)."""
    try:
        return njit(cache=True, nogil=True, **flags)(function)
    except RuntimeError:
        return njit(nogil=True, **flags)(function)


class _Refused(importlib.abc.MetaPathFinder):
    """Refuses one package to the thread that installed it (other threads import it as usual)."""

    def __init__(self, name: str) -> None:
        self.name, self.thread = name, threading.get_ident()

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname == self.name and threading.get_ident() == self.thread:
            raise ImportError(f"{fullname} is not imported for numba's BLAS check")
        return None


def _without_blas_check() -> None:
    """Import numba's NumPy implementations with its BLAS check answered "none", in a process
    hieval owns (a command line's) where scipy's linear algebra is not imported yet.

    Why: the first time numba loads a compiled loop it imports its NumPy implementations, and
    one of them (``numba.np.arraymath``) checks whether BLAS is there by importing
    ``scipy.linalg.cython_blas``, that is all of ``scipy.linalg`` (with ``numpy.testing``,
    ``unittest`` and ``numpy.f2py``): about 0.35 s of CPU holding the interpreter's lock, at
    100x MIMIC-III in the middle of the reading, which needs that lock between its calls. None
    of hieval's loops uses BLAS; the answer only decides whether numba's own ``np.correlate``
    and ``np.convolve`` call it or a plain loop. A notebook's process is left alone (its own
    numba code may want BLAS), and so is one whose scipy.linalg is loaded already (the check
    then costs nothing)."""
    if not collector.owned() or _BLAS_PACKAGE in sys.modules or "numba.np.arraymath" in sys.modules:
        return
    refused = _Refused(_BLAS_PACKAGE)
    sys.meta_path.insert(0, refused)
    try:
        import numba.np.arraymath  # noqa: F401 (its import is the check)
    finally:
        sys.meta_path.remove(refused)


_without_blas_check()
