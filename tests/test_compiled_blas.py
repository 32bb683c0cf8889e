"""numba's BLAS check answered without importing scipy.linalg, in a process hieval owns only
(hieval.compiled): a command line's run no longer spends about 0.35 s of CPU, holding the
interpreter's lock, importing scipy's linear algebra that none of its loops uses."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from hieval.compiled import _Refused

PROBE = """
import sys
from hieval import collector
if {owned}:
    collector.own_process()
if {scipy_first}:
    import scipy.linalg
from hieval.engine import lca_compiled
lca_compiled.warm()  # numba loads its NumPy implementations here
import numba.np.arraymath as arraymath
print(arraymath._HAVE_BLAS, "scipy.linalg" in sys.modules)
"""


def _probe(*, owned: bool, scipy_first: bool = False) -> str:
    code = PROBE.format(owned=owned, scipy_first=scipy_first)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_command_lines_process_loads_the_kernels_without_scipy_linalg():
    assert _probe(owned=True) == "False False"


def test_a_library_process_keeps_numbas_own_check():
    """A notebook's numba code may want BLAS (np.correlate, np.convolve): left as numba has it."""
    assert _probe(owned=False) == "True True"


def test_scipy_linalg_loaded_already_is_used():
    assert _probe(owned=True, scipy_first=True) == "True True"


def test_the_refusal_is_the_installing_threads_only(tmp_path, monkeypatch):
    (tmp_path / "hieval_refusal_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    refused = _Refused("hieval_refusal_probe")
    sys.meta_path.insert(0, refused)
    try:
        with pytest.raises(ImportError, match="not imported"):
            import hieval_refusal_probe  # noqa: F401
        seen: list[int] = []

        def other() -> None:
            import hieval_refusal_probe

            seen.append(hieval_refusal_probe.VALUE)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert seen == [1]
    finally:
        sys.meta_path.remove(refused)
        sys.modules.pop("hieval_refusal_probe", None)


def test_the_command_lines_imports_leave_numba_for_its_count():
    """The shortcut applies to a module that imports ``hieval.compiled`` once the process is
    owned (console.loaded: after ``hieval.cli``'s imports): loaded earlier, numba's check
    would run as usual. ``hieval.cli`` must not import it (nor numba, nor scipy.linalg)."""
    code = (
        "import sys, hieval.cli; "
        "print(*(m in sys.modules for m in ('hieval.compiled', 'numba', 'scipy.linalg')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False"]
