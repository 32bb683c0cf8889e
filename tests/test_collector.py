"""The compiled kernels' background load (numba's import) runs with the cyclic collector
paused (hieval.collector), and leaves it running afterwards."""

from __future__ import annotations

import gc

import pytest

from hieval.engine import counts_compiled, lca, lca_compiled


@pytest.fixture(autouse=True)
def _owned(monkeypatch):
    """A command-line process's state (its entry point owns the process)."""
    from hieval import collector

    monkeypatch.setattr(collector, "_owned", True)


def test_the_kernels_load_with_the_collector_paused(monkeypatch):
    seen: list[bool] = []
    monkeypatch.setattr(lca_compiled, "warm", lambda: seen.append(gc.isenabled()))
    monkeypatch.setattr(counts_compiled, "warm", lambda: seen.append(gc.isenabled()))
    assert gc.isenabled()
    lca.prefetch_compiled().join()
    assert seen == [False, False]
    assert gc.isenabled()


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_in_a_library_call_the_background_load_leaves_the_collector_alone(monkeypatch):
    """A library call (a notebook's) may return while the load still runs: the collector is
    the caller's, and stays on."""
    from hieval import collector

    monkeypatch.setattr(collector, "_owned", False)
    seen: list[bool] = []
    monkeypatch.setattr(lca_compiled, "warm", lambda: seen.append(gc.isenabled()))
    monkeypatch.setattr(counts_compiled, "warm", lambda: seen.append(gc.isenabled()))
    lca.prefetch_compiled().join()
    assert seen == [True, True]


def test_a_failed_load_leaves_the_collector_running_and_prints_nothing(monkeypatch, capsys):
    def fail():
        raise RuntimeError("no compiler")

    monkeypatch.setattr(lca_compiled, "warm", fail)
    lca.prefetch_compiled().join()  # the failure is left for the count's own import to meet
    assert gc.isenabled()
    assert capsys.readouterr().err == ""


FROZEN = """
import gc, runpy, sys
sys.argv = ["hieval", "hierarchy", "--help"]
try:
    {entry}
finally:  # before the exit's own unfreezing
    print("frozen", gc.get_freeze_count())
"""


@pytest.mark.parametrize(
    "entry",
    ["runpy.run_module('hieval.cli', run_name='__main__')",
     "from hieval.console import main; main()"],
)  # fmt: skip
def test_a_command_line_process_freezes_its_modules_objects(entry):
    """Both entry points (``python -m hieval.cli``, the ``hieval`` script) freeze the objects
    of their imports before running (``gc.freeze``): later full collections skip them."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", FROZEN.format(entry=entry)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    frozen = int(done.stdout.split("frozen")[-1])
    assert frozen > 10_000, done.stdout + done.stderr


def test_a_library_call_freezes_nothing(capsys):
    from hieval import cli

    with pytest.raises(SystemExit):
        cli.main(["hierarchy", "--help"])
    assert gc.get_freeze_count() == 0


def test_an_encoding_handed_after_the_analysis_ended_is_not_kept():
    """The error analysis ended (failed on an earlier model, say): a later count hands it
    nothing to hold, and what it had been handed but not taken is let go."""
    from hieval.analysis_stage import Encodings

    labels, codes = object(), object()
    encodings = Encodings(["a", "b"])
    encodings.hand("a")(labels, codes)
    encodings.close()
    encodings.hand("b")(labels, codes)
    assert encodings.pending("a")() is None
    assert encodings.pending("b")() is None


def test_an_encoding_is_handed_while_the_analysis_runs():
    from hieval.analysis_stage import Encodings

    labels, codes = object(), object()
    encodings = Encodings(["a", "b"])
    encodings.hand("a")(labels, codes)
    encodings.hand("b")(labels, codes)  # "a" not taken yet: "b" is read from its files
    taken = encodings.pending("a")()
    assert taken is not None and taken.labels is labels and taken.codes is codes
    assert encodings.pending("b")() is None


@pytest.mark.parametrize(
    "args", [["-m", "hieval.cli", "--help"], ["-m", "hieval.cli", "evaluate", "--help"]]
)
def test_a_command_line_process_exits_without_leak_reports(args):
    """Frozen objects are unfrozen at exit: otherwise they are never collected and DuckDB's
    bindings print a screen of "leaked instance" lines after a normal exit."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr, done.stderr[:500]
