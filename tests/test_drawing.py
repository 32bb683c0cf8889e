"""The report's figures drawn in worker processes (hieval.reports.drawing): the same bytes as
drawn in the run's own process, errors raised as there, a dead worker's figure drawn there,
and no worker process for anything but a command line's ``evaluate`` with two threads."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import polars as pl
import pytest
from golden_outputs import GOLDEN, INPUTS, zoo_arguments, zoo_files

from hieval import collector
from hieval.reports import drawing, figures

LEVELS = ("e0", "e1", "e2", "c")
MODELS = ["cautious_coder", "over_predictor", "sibling_confuser", "distant_guesser"]

#: Runs ``hieval`` as its console script does, recording what each figure request returned:
#: a placeholder means a worker drew it.
RECORDING = """
import atexit, json, os, sys

from hieval.reports import drawing

if __name__ == "__main__":
    asked = []
    original = drawing.Figures.draw

    def draw(self, function, /, *args, **kwargs):
        result = original(self, function, *args, **kwargs)
        asked.append([function.__name__, result.startswith("<!--hieval-figure-")])
        return result

    drawing.Figures.draw = draw
    record = os.environ["RECORD"]
    atexit.register(lambda: open(record, "w").write(json.dumps(asked)))
    from hieval.console import main

    sys.exit(main())
"""


def _env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    return os.environ | {"PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


def _semaphores() -> bool:
    """Whether this machine gives processes POSIX semaphores (a process pool needs them)."""
    try:
        multiprocessing.get_context("forkserver").Lock()
    except (OSError, ImportError):
        return False
    return True


def test_a_command_line_run_draws_the_golden_zoo_in_workers_byte_for_byte(tmp_path):
    """The golden zoo (five figures: per level, disagreement, error distance, thresholds,
    training frequency) run as a user runs it: every figure drawn by a worker, every output
    the fixtures' bytes, nothing on stderr that a run without workers would not print."""
    script, record = tmp_path / "hieval_script.py", tmp_path / "asked.json"
    script.write_text(RECORDING)
    out = tmp_path / "zoo"
    done = subprocess.run(
        [sys.executable, str(script), *zoo_arguments(out, tmp_path / "cache")],
        cwd=INPUTS, env=_env() | {"RECORD": str(record)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    asked = json.loads(record.read_text())
    assert len(asked) == 5, asked
    if _semaphores():  # else drawn in-process, as the run falls back to
        assert all(by_worker for _, by_worker in asked), asked
    expected = sorted(
        str(p.relative_to(GOLDEN / "zoo")) for p in (GOLDEN / "zoo").rglob("*") if p.is_file()
    )
    assert zoo_files(out) == expected
    differ = [n for n in expected if (out / n).read_bytes() != (GOLDEN / "zoo" / n).read_bytes()]
    assert differ == []
    for noise in ("Traceback", "Warning", "leaked"):
        assert noise not in done.stderr, done.stderr[-3000:]


@pytest.fixture
def workers(monkeypatch):
    """Figure workers started from this (test) process, as a command line's run starts them."""
    monkeypatch.setattr(collector, "_owned", True)
    monkeypatch.setattr(drawing, "_server_started", False)
    drawing.start_early(["hieval", "evaluate"])
    if not drawing._server_started:
        pytest.skip("no fork server on this machine: figures are drawn in-process")
    if not drawing.start(threads=2):
        pytest.skip("no process pool on this machine (POSIX semaphores): drawn in-process")
    yield
    drawing.stop()


def _tidy() -> pl.DataFrame:
    return pl.read_parquet(GOLDEN / "zoo" / "metrics.parquet")


def test_a_figure_drawn_by_a_worker_is_the_one_drawn_here(workers):
    tidy = _tidy()
    figs = drawing.Figures()
    placeholder = figs.draw(figures.per_level, tidy, levels=LEVELS, models=MODELS)
    assert placeholder.startswith("<!--hieval-figure-")
    page = f"<p>before</p>{placeholder}<p>after</p>"
    here = figures.per_level(tidy, levels=LEVELS, models=MODELS)
    assert figs.resolve(page) == f"<p>before</p>{here}<p>after</p>"


def _fails(message: str) -> str:
    raise ValueError(message)


def _dies_in_a_worker(tidy: pl.DataFrame) -> str:
    """Kills the worker process it runs in; drawn here, a figure."""
    if multiprocessing.parent_process() is not None:  # a worker
        os._exit(3)
    return figures.per_level(tidy, levels=LEVELS, models=MODELS)


def test_a_figures_error_is_raised_as_if_drawn_here(workers):
    figs = drawing.Figures()
    page = figs.draw(_fails, "no such level")
    with pytest.raises(ValueError, match="no such level"):
        figs.resolve(page)


def test_a_worker_that_dies_leaves_its_figure_to_be_drawn_here(workers):
    tidy = _tidy()
    figs = drawing.Figures()
    page = figs.draw(_dies_in_a_worker, tidy)
    assert page.startswith("<!--hieval-figure-")
    assert figs.resolve(page) == figures.per_level(tidy, levels=LEVELS, models=MODELS)
    assert drawing._pool is None  # the later figures are drawn here
    assert figs.draw(figures.per_level, tidy, levels=LEVELS, models=MODELS).startswith("<svg")


@pytest.mark.parametrize(
    "argv",
    [
        ["hieval", "hierarchy", "--out", "x"],
        ["hieval", "evaluate", "--help"],
        ["hieval", "evaluate", "--gold", "g.csv", "--threads", "1"],
        ["hieval", "evaluate", "--threads=1"],
        ["hieval"],
    ],
)
def test_no_server_for_commands_that_draw_nothing_or_have_one_thread(argv, monkeypatch):
    monkeypatch.setattr(drawing, "_server_started", False)
    drawing.start_early(argv)
    assert not drawing._server_started


def test_a_library_call_draws_in_its_own_process(monkeypatch):
    """A notebook's process is not hieval's: no workers, even with a server running."""
    monkeypatch.setattr(collector, "_owned", False)
    monkeypatch.setattr(drawing, "_server_started", True)
    assert not drawing.start(threads=8)
    assert drawing.Figures().draw(str, "<svg/>") == "<svg/>"


def test_one_thread_draws_in_its_own_process(monkeypatch):
    monkeypatch.setattr(collector, "_owned", True)
    monkeypatch.setattr(drawing, "_server_started", True)
    assert not drawing.start(threads=1)


def test_a_run_that_fails_early_leaves_no_process_behind(tmp_path):
    """A run refused in its first second (the server still importing) ends the server at
    exit and reaps it: once the run's process has exited, none of its processes is left (one
    left would hold its stderr open, and keep importing, for whoever reads it to the end)."""
    mark = f"hieval-test-{uuid.uuid4()}"
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as sink:
        code = subprocess.call(
            [sys.executable, "-m", "hieval.cli", "evaluate", "--gold", str(tmp_path / "none.csv"),
             "--pred", f"m={tmp_path / 'none.csv'}", "--out", str(tmp_path / "out")],
            env=_env() | {"HIEVAL_TEST_MARK": mark}, stdout=subprocess.DEVNULL, stderr=sink,
            timeout=120,
        )  # fmt: skip
    left = _processes_marked(mark)
    assert code != 0
    assert "does not exist" in stderr.read_text()
    assert "Traceback" not in stderr.read_text()
    assert left == []


def _processes_marked(mark: str) -> list[str]:
    """The command lines of the live fork servers whose environment holds ``mark`` (the run's
    children). Not its resource tracker: that one ends by itself once the processes holding
    its pipe are gone, a moment after the run."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                command = (proc / "cmdline").read_bytes()
                if mark.encode() in (proc / "environ").read_bytes() and b"forkserver" in command:
                    found.append(command.decode(errors="replace"))
            except OSError:  # gone meanwhile, or not ours to read
                continue
    return found


def test_python_dash_m_hieval_is_the_hieval_command():
    done = subprocess.run(
        [sys.executable, "-m", "hieval", "--help"], env=_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "evaluate" in done.stdout and done.stderr == ""


@pytest.mark.parametrize(
    "refusal", [OSError(38, "Function not implemented"), NotImplementedError("too few")]
)
def test_no_semaphores_draws_in_its_own_process(monkeypatch, refusal):
    """A machine without POSIX semaphores (no /dev/shm, too few) cannot run a process pool:
    the figures are drawn here, the run goes on."""

    def refused(*args, **kwargs):
        raise refusal

    monkeypatch.setattr(collector, "_owned", True)
    monkeypatch.setattr(drawing, "_server_started", True)
    monkeypatch.setattr(drawing, "ProcessPoolExecutor", refused)
    assert not drawing.start(threads=2)
    assert drawing._pool is None


KILLED = """
import os, signal, time
from hieval import collector
from hieval.reports import drawing
if __name__ == "__main__":
    drawing.start_early(["hieval", "evaluate"])
    collector.own_process()
    if drawing.start(threads=2):
        drawing.Figures().draw(time.sleep, 60)  # a worker busy when the run is killed
        time.sleep(1.5)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_killed_outright_takes_its_server_and_workers_with_it(tmp_path):
    """SIGKILL (or the out-of-memory killer) runs no exit handler: the kernel ends the server
    with the run and a worker with the server (PR_SET_PDEATHSIG), so none lives on holding
    the run's stderr open."""
    if not sys.platform.startswith("linux") or not _semaphores():
        pytest.skip("Linux with POSIX semaphores only")
    script, mark = tmp_path / "killed.py", f"hieval-test-{uuid.uuid4()}"
    script.write_text(KILLED)
    code = subprocess.call(
        [sys.executable, str(script)], env=_env() | {"HIEVAL_TEST_MARK": mark},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    assert code == -9
    left = _processes_marked(mark)
    for _ in range(50):  # the kernel's signal, then their exit: a moment
        if not left:
            break
        time.sleep(0.1)
        left = _processes_marked(mark)
    assert left == []


def test_no_server_for_a_process_allowed_one_core(monkeypatch):
    """taskset, a SLURM job of one CPU: nothing to draw beside the run."""
    monkeypatch.setattr(drawing, "_server_started", False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    drawing.start_early(["hieval", "evaluate", "--gold", "g.csv"])
    assert not drawing._server_started


def test_readied_workers_are_forked_before_the_first_figure_and_draw_the_same(workers):
    """The run readies its workers once its last model is counted: both are forked and warm
    before the report asks for a figure, and a warm worker's figure is the one drawn here."""
    thread = drawing.ready()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert len(drawing._pool._processes) == drawing.WORKERS
    assert [future.result(timeout=120) for future in drawing._warm_workers()] == ["", ""]
    tidy = _tidy()
    figs = drawing.Figures()
    page = figs.draw(figures.per_level, tidy, levels=LEVELS, models=MODELS)
    assert figs.resolve(page) == figures.per_level(tidy, levels=LEVELS, models=MODELS)


def test_without_workers_ready_does_nothing(monkeypatch):
    monkeypatch.setattr(drawing, "_pool", None)
    assert drawing.ready() is None
    assert drawing._warm_workers() == []


def test_the_warm_up_figure_is_dropped():
    plt = figures._pyplot()
    before = plt.get_fignums()
    assert figures.warm() == ""
    assert plt.get_fignums() == before
