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

from collections.abc import Callable
from typing import Any

from numba import njit


def compiled(function: Callable, **flags: Any) -> Callable:
    """``function`` compiled without the GIL, cached on disk where numba can; ``flags`` are
    passed on to ``njit`` (e.g. ``fastmath``)."""
    try:
        return njit(cache=True, nogil=True, **flags)(function)
    except RuntimeError:
        return njit(nogil=True, **flags)(function)
