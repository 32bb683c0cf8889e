"""Issue 30, read a second time as a hostile user: new variants of its output, fault,
uncertainty and workflow cases that broke after the first round of fixes.

Each test names the variant it covers; the issue's own cases are tested in
tests/test_out_folder.py, tests/test_bootstrap_edges.py, tests/test_cache_verify.py,
tests/test_reports_round3.py and tests/test_workflow_round3.py.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_out_folder as base

#: The fixtures of the issue's own tests: a --cache with the built ICD-9 tables; gold and
#: predictions.
cache, inputs = base.cache, base.inputs
evaluate = base.evaluate

# --- Log lines name the final paths, never the staging folder ---------------------------


def test_report_log_line_names_the_output_folder_not_the_staging_one(
    tmp_path,
    inputs,
    cache,
    capsys,
):
    """The library logged "wrote …/.OUT.xxxx.partial/report.html": a folder that is gone
    (renamed to OUT) by the time the user reads the line."""
    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=cache) == 0
    err = capsys.readouterr().err
    wrote = [line for line in err.splitlines() if "report.html" in line]
    assert len(wrote) == 1, err
    assert ".partial" not in err
    assert f"{out}/report.html" in wrote[0]
    assert (out / "report.html").is_file()


# --- A workflow job stopped by a signal cleans up ------------------------------------------

#: A workflow script (through run_rule, as every script in scripts/ is) that is writing its
#: output through atomic_path when a signal arrives: argv[1] is the folder, argv[2] the signal.
STOPPED_JOB = """
import os, signal, sys, time
from pathlib import Path
from types import SimpleNamespace
from hieval.atomic import atomic_path
from hieval.workflow_script import run_rule
folder = Path(sys.argv[1])
def main(smk):
    with atomic_path(folder / "out.parquet") as tmp:
        tmp.write_text("half")
        (folder / "ready").touch()
        time.sleep(60)
smk = SimpleNamespace(rule="count", log=[str(folder / "job.log")])
run_rule(smk, main)
"""


@pytest.mark.parametrize(
    ("signal_name", "word", "code"),
    [("SIGTERM", "terminated", 143), ("SIGINT", "interrupted", 130)],
)
def test_workflow_job_stopped_by_a_signal_removes_its_temporary_file(
    tmp_path, signal_name, word, code
):
    """A Snakemake job killed by SIGTERM (a cancelled run, a cluster's time limit) left its
    `.out.parquet.XXXX.tmp` beside the output forever, and its log did not say why it ended."""
    import signal

    job = subprocess.Popen(
        [sys.executable, "-c", STOPPED_JOB, str(tmp_path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    job.send_signal(getattr(signal, signal_name))
    _, err = job.communicate(timeout=60)
    assert job.returncode == code, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.log", "ready"]
    log = (tmp_path / "job.log").read_text().strip().splitlines()
    assert log[-1].endswith(f"count: {word}"), log
    assert "Traceback" not in err


# --- Failed writes name the place that failed ----------------------------------------------


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "hieval: error:" in line]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("command", ["evaluate", "hierarchy"])
def test_out_under_a_file_names_the_file_in_the_way(tmp_path, inputs, cache, capsys, command):
    """`--out gold.csv/o` said "(File exists)": the file in the way was not named."""
    gold, pred = inputs
    out = gold / "o" / "p"
    if command == "evaluate":
        assert evaluate(gold, pred, out, cache=cache) == 1
    else:
        assert base.cli.main(["hierarchy", "--out", str(out), "--cache", str(cache)]) == 1
    line = _one_error_line(capsys)
    assert f"{gold} is a file, not a folder" in line, line
    assert "File exists" not in line
    assert gold.read_text() == base.GOLD


def test_failed_cache_write_is_named_as_the_cache_not_the_input_beside_it(tmp_path, inputs, capsys):
    """A --cache under the gold's path was reported as "in --gold …": the innermost option
    whose path holds the failed write is the one the user must change."""
    gold, pred = inputs
    assert evaluate(gold, pred, tmp_path / "eval", cache=gold / "cache") == 1
    line = _one_error_line(capsys)
    assert f"in --cache {gold / 'cache'}," in line, line
    assert "in --gold" not in line


# --- The workflow's history -----------------------------------------------------------------


def test_history_that_is_a_folder_is_refused_before_any_job(tmp_path):
    """A folder at the history's path (a Parquet dataset, say) was read as one table by
    Polars, so the check before the jobs passed and the report job failed at the end, when
    it could not replace a folder with the history file (Snakemake then deletes the report)."""
    import polars as pl

    from hieval.errors import InputError
    from hieval.reports.history import SCHEMA, check_history

    history = tmp_path / "results" / "history" / "evaluations.parquet"
    history.mkdir(parents=True)
    pl.DataFrame(schema=SCHEMA).write_parquet(history / "part-0.parquet")
    with pytest.raises(InputError, match=r"is a folder, not a file; move it aside") as refused:
        check_history(history)
    assert len(str(refused.value).splitlines()) == 1
    assert (history / "part-0.parquet").is_file()


# --- Staging folders of dead runs -----------------------------------------------------------


def test_dead_runs_folder_of_a_sibling_output_is_not_taken_for_this_ones(tmp_path, inputs, cache):
    """A run of `--out eval.x` killed during its swap left `.eval.x.XXXX.old/previous` (its
    previous outputs) and no `eval.x`. A run of `--out eval` took it for its own: it moved
    eval.x's outputs to `eval`, then replaced them with its own (they were lost)."""
    sibling = tmp_path / "eval.x"
    assert evaluate(*inputs, sibling, cache=cache, name="old") == 0
    old = base.staging_of(base.dead_pid(), tmp_path / ".eval.x.k1ll3d00.old")
    base.shutil.rmtree(old / "work")
    base.os.replace(sibling, old / "previous")
    assert evaluate(*inputs, tmp_path / "eval", cache=cache) == 0
    assert (tmp_path / "eval" / "nodes" / "m.csv").is_file()
    assert (old / "previous" / "nodes" / "old.csv").is_file()  # eval.x's, kept for eval.x
    # the next run of eval.x puts them back where they were (then replaces them as its own)
    assert evaluate(*inputs, sibling, cache=cache, name="new") == 0
    assert (sibling / "nodes" / "new.csv").is_file()
    assert not old.exists()


def test_temp_directory_that_cannot_be_made_is_named(tmp_path, cache, capsys, monkeypatch):
    """DuckDB's spill folder under a file was reported as "cannot write the outputs to OUT"
    (its error quotes a relative path, which was not recognised as one), with no advice."""
    import polars as pl

    documents = 300_000  # enough that DuckDB reads the gold and spills under 70MB
    gold = tmp_path / "gold.csv"
    pl.DataFrame(
        {
            "doc_id": [f"doc{n:07d}" for n in range(documents) for _ in range(3)],
            "code": ["401.9", "250.00", "96.04"] * documents,
        }
    ).write_csv(gold)
    monkeypatch.chdir(tmp_path)  # paths as a user types them: relative
    gold, spill = Path("gold.csv"), Path("gold.csv/tmp")
    extra = ("--memory-limit", "70MB", "--temp-directory", str(spill))
    assert evaluate(gold, gold, Path("eval"), *extra, cache=cache) == 1
    line = _one_error_line(capsys)
    assert f"cannot write {tmp_path / spill}, in --temp-directory {spill}," in line, line
    assert "a part of that path is a file" in line
    assert not (tmp_path / "eval").exists()


def test_temp_directory_starting_with_a_tilde_is_a_folder_of_that_name(
    tmp_path, cache, monkeypatch, capsys
):
    """DuckDB read `--temp-directory '~/spill'` as the home folder's spill/, although hieval's
    paths are literal (and its check that no input lies inside --out looked at ./~/spill).
    Here the home folder is a file, so spilling there fails; ./~/spill works, and the run
    goes on to the count job (which 70MB cannot hold: its own refusal ends the run)."""
    import polars as pl

    documents = 300_000  # DuckDB reads the gold and spills under 70MB
    pl.DataFrame(
        {
            "doc_id": [f"doc{n:07d}" for n in range(documents) for _ in range(3)],
            "code": ["401.9", "250.00", "96.04"] * documents,
        }
    ).write_csv(tmp_path / "gold.csv")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "~").mkdir()  # the user's folder named ~
    home = tmp_path / "home"
    home.write_text("a file: nothing can be spilled under it")
    monkeypatch.setenv("HOME", str(home))
    extra = ("--memory-limit", "70MB", "--temp-directory", "~/spill")
    gold = Path("gold.csv")
    evaluate(gold, gold, Path("eval"), *extra, cache=cache)
    line = _one_error_line(capsys)
    assert "spill" not in line and str(home) not in line, line
    assert "count job" in line, line
    assert (tmp_path / "~").is_dir()  # DuckDB's spill/ in it came and went
    assert home.read_text() == "a file: nothing can be spilled under it"


# --- Ctrl-C while the command line loads -----------------------------------------------------

#: The installed `hieval` console script, sent a signal (argv[1]) while its modules load: the
#: moment Polars is imported. argv[2:] are its arguments.
STOPPED_WHILE_LOADING = """
import os, signal, sys
from importlib.metadata import entry_points
STOP = getattr(signal, sys.argv[1])
class StopOnPolars:
    def find_spec(self, name, path=None, target=None):
        if name == "polars":
            os.kill(os.getpid(), STOP)
        return None
sys.meta_path.insert(0, StopOnPolars())
command = entry_points(group="console_scripts")["hieval"]
sys.argv = ["hieval", *sys.argv[2:]]
sys.exit(command.load()())
"""


@pytest.mark.parametrize(
    ("signal_name", "line", "code"),
    [("SIGINT", "hieval: interrupted", 130), ("SIGTERM", "hieval: terminated", 143)],
)
def test_signal_while_the_command_line_loads_says_so(tmp_path, signal_name, line, code):
    """Loading the command line takes most of a second; a Ctrl-C in it printed an import's
    KeyboardInterrupt traceback (exit -2), a SIGTERM ended it without a word."""
    out = tmp_path / "hierarchy"
    args = ["hierarchy", "--out", str(out), "--cache", str(tmp_path / "cache")]
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_WHILE_LOADING, signal_name, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == code, done.stderr
    assert done.stderr.strip().splitlines() == [line]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", ["--out", "--gold", "--pred"])
def test_path_too_long_for_the_file_system_is_one_line(tmp_path, inputs, cache, capsys, option):
    """A 256-character --out ended in an OSError traceback (Path.exists raises for a name too
    long); a 256-character --gold was reported as "cannot write" the gold."""
    gold, pred = inputs
    long_name = tmp_path / ("n" * 256)
    out = tmp_path / "eval"
    if option == "--out":
        out = long_name
    elif option == "--gold":
        gold = long_name
    else:
        pred = long_name
    assert evaluate(gold, pred, out, cache=cache) == 1
    line = _one_error_line(capsys)
    assert "File name too long" in line, line
    assert ("cannot write the output folder" if option == "--out" else "cannot read") in line


# --- The workflow's record of its report files ----------------------------------------------


@pytest.mark.parametrize("recorded_as", ["absolute", "through a link", "climbing out"])
def test_report_manifest_never_reaches_a_file_outside_the_report_folder(tmp_path, recorded_as):
    """An edited or copied `.hieval-outputs.json` naming a file outside results/report (an
    absolute path, a path through a symbolic link inside the folder, `..`) with that file's
    sha256 made the report job delete the user's file."""
    import hashlib
    import json

    from hieval.reports.leftovers import MANIFEST, remove_leftovers

    report = tmp_path / "results" / "report"
    report.mkdir(parents=True)
    (report / "summary.md").write_text("this run's\n")
    thesis = tmp_path / "thesis" / "thesis.tex"
    thesis.parent.mkdir()
    thesis.write_text("the user's\n")
    (report / "mine").symlink_to(thesis.parent)
    name = {
        "absolute": str(thesis),
        "through a link": "mine/thesis.tex",
        "climbing out": "../../thesis/thesis.tex",
    }[recorded_as]
    sha = hashlib.sha256(thesis.read_bytes()).hexdigest()
    (report / MANIFEST).write_text(json.dumps({"files": {name: sha}}))
    assert remove_leftovers(report, [report / "summary.md"]) == []
    assert thesis.read_text() == "the user's\n"


def test_out_stepping_out_of_a_missing_folder_creates_nothing_else(
    tmp_path, inputs, cache, monkeypatch
):
    """`--out new/../eval` wrote eval/ but left an empty `new/` behind, created only to step
    out of it."""
    monkeypatch.chdir(tmp_path)
    assert evaluate(*inputs, Path("new/../eval"), cache=cache) == 0
    assert base.flat_counts(tmp_path / "eval") == (1, 0, 2)
    assert not (tmp_path / "new").exists()


# --- A leading ~ is a folder's name, in every reader -----------------------------------------

TREE = "child,parent,title\nA,,a\nB,,b\nA1,A,x\nA2,A,y\n"
#: The same codes under two roots: read instead of TREE, it changes the d1 numbers.
DECOY_TREE = "child,parent,title\nA,,a\nB,,b\nA1,A,x\nA2,B,y\n"


def test_tree_and_cache_under_a_folder_named_tilde_are_read_literally(tmp_path, monkeypatch):
    """Polars expands a leading `~` whatever it is told: `--hierarchy '~/tree.csv'` read the
    home folder's tree.csv (a decoy here) instead of ./~/tree.csv; `--cache '~'` the same."""
    from hieval import cli

    home = tmp_path / "home"
    home.mkdir()
    (home / "tree.csv").write_text(DECOY_TREE)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "~").mkdir()
    (tmp_path / "~" / "tree.csv").write_text(TREE)
    (tmp_path / "g.csv").write_text("doc_id,code\nd1,A1\nd2,A2\n")
    (tmp_path / "p.csv").write_text("doc_id,code\nd1,A1\nd2,A1\n")
    args = ["evaluate", "--gold", "g.csv", "--pred", "m=p.csv", "--hierarchy", "~/tree.csv"]
    assert cli.main([*args, "--out", "eval", "--cache", "~", "--bootstrap", "0"]) == 0
    tidy = base.pl.read_csv(tmp_path / "eval" / "metrics.csv").filter(
        (base.pl.col("family") == "set")
        & (base.pl.col("level") == "d1")
        & (base.pl.col("average") == "micro")
        & (base.pl.col("metric") == "f1")
    )
    # TREE: both codes are under A, so at d1 both documents are right (F1 1); DECOY_TREE
    # would put d2's gold under B and its prediction under A (F1 0.5)
    assert tidy["value"].item() == 1.0
