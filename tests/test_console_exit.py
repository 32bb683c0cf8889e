"""The command line ends without the interpreter's teardown (:func:`hieval.console.finish`):
what the teardown would have done that matters — exit handlers, waiting for threads, flushing
stdout and stderr — must still happen, and the outputs must be those of an in-process run."""

from __future__ import annotations

import os
import subprocess
import sys

import polars as pl
import test_out_folder as base
from polars.testing import assert_frame_equal

cache, inputs = base.cache, base.inputs

#: finish(3) after an exit handler, a thread still writing, unflushed stdout and a temporary
#: folder: argv[1] is a folder to write into.
FINISH = """
import atexit, sys, tempfile, threading, time
from pathlib import Path
from hieval.console import finish
folder = Path(sys.argv[1])
atexit.register(lambda: (folder / "handler").write_text("ran"))
scratch = tempfile.TemporaryDirectory(dir=folder)
(folder / "scratch").write_text(scratch.name)
def slow():
    time.sleep(0.5)
    (folder / "thread").write_text("done")
threading.Thread(target=slow).start()
sys.stdout.write("buffered, no newline")
finish(3)
"""


def test_finish_runs_handlers_waits_for_threads_and_flushes(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", FINISH, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered, no newline"
    assert (tmp_path / "handler").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "done"
    scratch = (tmp_path / "scratch").read_text()
    assert scratch.startswith(str(tmp_path))
    assert not (tmp_path / scratch).exists(), "the temporary folder's clean-up did not run"


def test_command_line_process_writes_what_an_in_process_run_writes(tmp_path, inputs, cache):
    gold, pred = inputs
    command = [sys.executable, "-m", "hieval.cli", "evaluate", "--gold", str(gold), "--pred",
               f"m={pred}", "--cache", str(cache)]  # fmt: skip
    done = subprocess.run(
        [*command, "--out", str(tmp_path / "process")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "metrics.parquet" in done.stderr.strip().splitlines()[-1]  # the last line arrived
    assert base.evaluate(gold, pred, tmp_path / "in", cache=cache) == 0
    for name in ("metrics.parquet", "summary.csv"):
        process, in_process = tmp_path / "process" / name, tmp_path / "in" / name
        if name.endswith(".parquet"):
            assert_frame_equal(pl.read_parquet(process), pl.read_parquet(in_process))
        else:
            assert process.read_bytes() == in_process.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gold.csv", "in", "pred.csv", "process"]


#: A one-rule workflow whose script job goes through run_rule, as every script in scripts/
#: does; an object whose finaliser the interpreter's teardown would run.
JOB_SNAKEFILE = """
rule all:
    output: "out.txt"
    log: "job.log"
    script: "job.py"
"""
JOB_SCRIPT = """
import sys, threading, time
from hieval.workflow_script import run_rule
class Finalised:
    def __del__(self):
        sys.stderr.write("teardown ran\\n")
kept = Finalised()
def main(smk):
    def late():
        time.sleep(0.3)
        open(smk.output[0], "w").write("written by a thread")
    threading.Thread(target=late).start()
run_rule(snakemake, main)
"""


def test_a_workflow_job_ends_without_the_teardown_and_loses_nothing(tmp_path):
    from pathlib import Path

    (tmp_path / "Snakefile").write_text(JOB_SNAKEFILE)
    (tmp_path / "job.py").write_text(JOB_SCRIPT)
    snakemake = Path(sys.executable).with_name("snakemake")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [str(snakemake), "--cores", "1", "-q"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.txt").read_text() == "written by a thread"
    assert "all: done" in (tmp_path / "job.log").read_text()
    assert "teardown ran" not in done.stderr
