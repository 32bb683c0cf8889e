"""Nothing lost in --out: a run replaces only what it can prove it wrote, met as a user loses
data (files nested in the folder, inputs under it, a file created during the run, symbolic
links), and every path of a run, intermediates and caches included, is literal.

Each refusal is one line naming the file and what to do, exit code 1, no traceback, and leaves
the folder exactly as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from helpers import prebuilt_tables
from test_outputs import tmpfs

from hieval import cli, run
from hieval.atomic import STAGING_MARKER
from hieval.ownership import MANIFEST

GOLD = "doc_id,code\nd1,401.9\nd1,96.04\nd2,364.11\n"
#: One hit (401.9), two misses: flat micro TP 1, FP 0, FN 2.
PRED = "doc_id,code\nd1,401.9\n"
#: Every gold label: TP 3, FP 0, FN 0.
DECOY = GOLD


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A --cache holding the built ICD-9 tables, as a machine that ran hieval before has it."""
    folder = tmp_path_factory.mktemp("cache")
    shutil.copytree(prebuilt_tables(), folder / "hierarchy" / "built")
    return folder


@pytest.fixture
def inputs(tmp_path) -> tuple[Path, Path]:
    (tmp_path / "gold.csv").write_text(GOLD)
    (tmp_path / "pred.csv").write_text(PRED)
    return tmp_path / "gold.csv", tmp_path / "pred.csv"


def evaluate(gold: Path, pred: Path, out: Path, *extra: str, cache: Path, name: str = "m") -> int:
    return cli.main(
        [
            "evaluate",
            "--gold",
            str(gold),
            "--pred",
            f"{name}={pred}",
            "--out",
            str(out),
            "--cache",
            str(cache),
            "--bootstrap",
            "0",
            *extra,
        ]
    )


def flat_counts(out: Path) -> tuple[float, float, float]:
    """Flat micro TP, FP, FN of model ``m``, read from ``out/metrics.csv``."""
    tidy = pl.read_csv(out / "metrics.csv", glob=False).filter(
        (pl.col("family") == "flat") & (pl.col("average") == "micro")
    )
    value = dict(tidy.select("metric", "value").rows())
    return value["tp"], value["fp"], value["fn"]


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder`` (links not followed) with its content or link target."""
    seen: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            seen[key] = f"-> {os.readlink(path)}"
        elif path.is_file():
            seen[key] = path.read_bytes()
        else:
            seen[key] = "dir"
    return seen


def leftovers(parent: Path) -> list[str]:
    """Staging folders (``.NAME.*.partial`` / ``.old``) beside an output folder."""
    return sorted(p.name for p in parent.iterdir() if p.name.endswith((".partial", ".old")))


def one_line_refusal(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "hieval: error:" in line]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# --- Files of the user's, anywhere in the folder ------------------------------------------


@pytest.mark.parametrize(
    "files",
    [
        {"work/thesis.docx": "x", "figures/plot.png": "p"},
        {"nodes/notes.txt": "n"},
        {"work/inputs/deep/er/data.csv": "d"},
        {"metrics.parquet": "not hieval's"},  # a name hieval writes, a file it did not
    ],
)
def test_folder_never_written_by_hieval_is_refused_whole(tmp_path, inputs, cache, capsys, files):
    """`mkdir -p u/work u/figures; echo x > u/work/thesis.docx; ...; --out u` deleted both."""
    out = tmp_path / "u"
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    before = snapshot(out)
    assert evaluate(*inputs, out, cache=cache) == 1
    one_line_refusal(capsys, str(out), "choose a new --out, or empty it yourself")
    assert snapshot(out) == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("added", ["work/thesis.docx", "figures/mine/plot.png", "nodes/x.csv"])
def test_user_file_added_to_an_earlier_run_is_refused(tmp_path, inputs, cache, capsys, added):
    """The folder of an earlier run, with a file of the user's put in one of its folders."""
    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=cache) == 0
    (out / added).parent.mkdir(parents=True, exist_ok=True)
    (out / added).write_text("precious")
    before = snapshot(out)
    assert evaluate(*inputs, out, cache=cache) == 1
    one_line_refusal(capsys, added, "hieval did not write")
    assert snapshot(out) == before
    assert leftovers(tmp_path) == []


def test_output_file_the_user_changed_is_refused(tmp_path, inputs, cache, capsys):
    """summary.md edited by hand is no longer what hieval wrote: refused, not overwritten."""
    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=cache) == 0
    (out / "summary.md").write_text("my edited summary")
    assert evaluate(*inputs, out, cache=cache) == 1
    one_line_refusal(capsys, "summary.md")
    assert (out / "summary.md").read_text() == "my edited summary"


def test_a_users_copy_keeping_size_and_mtime_is_still_refused(tmp_path, inputs, cache, capsys):
    """A file of the user's put in place of an output with the same size and mtime (as
    `cp -p`, `rsync -a` or a restore leave it) is not what hieval wrote: refused, kept."""
    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=cache) == 0
    target = out / "summary.md"
    mine = tmp_path / "mine.md"
    mine.write_text("x" * target.stat().st_size)  # the user's text, of the output's size
    shutil.copystat(target, mine)  # and its times
    os.replace(mine, target)
    assert evaluate(*inputs, out, cache=cache) == 1
    one_line_refusal(capsys, "summary.md")
    assert target.read_text() == "x" * target.stat().st_size


def test_two_code_types_for_every_file_are_refused(tmp_path, inputs, cache, capsys):
    """`--code-type dx --code-type proc` kept the last without a word; one NAME given two
    values was refused already."""
    out = tmp_path / "eval"
    assert evaluate(*inputs, out, "--code-type", "dx", "--code-type", "proc", cache=cache) == 1
    one_line_refusal(capsys, "--code-type is given twice for every file: 'dx' and 'proc'")
    assert not out.exists()


def test_earlier_run_is_replaced_whole(tmp_path, inputs, cache):
    """What a run proves it wrote is replaced: a model of the last run leaves no files."""
    gold, pred = inputs
    out = tmp_path / "eval"
    assert evaluate(gold, pred, out, cache=cache, name="old") == 0
    assert evaluate(gold, pred, out, cache=cache) == 0
    assert sorted(p.name for p in (out / "nodes").iterdir()) == ["m.csv"]
    manifest = json.loads((out / MANIFEST).read_text())["entries"]
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*")} - {MANIFEST}
    assert set(manifest) == on_disk
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("link_to", ["folder", "file"])
def test_symlink_inside_the_folder_is_refused_and_not_followed(
    tmp_path, inputs, cache, capsys, link_to
):
    """A link in OUT/work to the user's data: neither the link nor what it points to goes."""
    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=cache) == 0
    data = tmp_path / "data"
    data.mkdir()
    (data / "precious.csv").write_text("keep")
    (out / "work" / "data").symlink_to(data if link_to == "folder" else data / "precious.csv")
    assert evaluate(*inputs, out, cache=cache) == 1
    one_line_refusal(capsys, "work/data")
    assert (out / "work" / "data").is_symlink()
    assert (data / "precious.csv").read_text() == "keep"


def test_out_that_is_a_symlink_is_refused(tmp_path, inputs, cache, capsys):
    """Replacing --out would replace the user's link (and the run would write elsewhere)."""
    real = tmp_path / "real"
    assert evaluate(*inputs, real, cache=cache) == 0
    link = tmp_path / "eval"
    link.symlink_to(real)
    assert evaluate(*inputs, link, cache=cache) == 1
    one_line_refusal(capsys, "symbolic link")
    assert link.is_symlink() and (real / MANIFEST).is_file()


def test_hierarchy_command_refuses_a_folder_of_the_users(tmp_path, cache, capsys):
    """`hieval hierarchy --out tables` overwrote the user's tables/levels.parquet."""
    out = tmp_path / "tables"
    out.mkdir()
    (out / "levels.parquet").write_text("the user's own table")
    args = ["hierarchy", "--out", str(out), "--cache", str(cache)]
    assert cli.main(args) == 1
    one_line_refusal(capsys, "'levels.parquet'")
    assert (out / "levels.parquet").read_text() == "the user's own table"
    (out / "levels.parquet").unlink()
    assert cli.main(args) == 0 and cli.main(args) == 0  # its own folder it replaces
    assert (out / "ancestors.parquet").is_file() and leftovers(tmp_path) == []


# --- Inputs inside --out ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["work/gold.csv", "gold.csv", "a/b/c/gold.csv"])
def test_inputs_inside_out_are_refused_and_kept(tmp_path, cache, capsys, where):
    """`--gold proj/work/gold.csv --pred m=proj/work/p1.csv --out proj` deleted both inputs."""
    proj = tmp_path / "proj"
    gold, pred = proj / where, proj / "work" / "p1.csv"
    gold.parent.mkdir(parents=True, exist_ok=True)
    pred.parent.mkdir(parents=True, exist_ok=True)
    gold.write_text(GOLD)
    pred.write_text(PRED)
    before = snapshot(proj)
    assert evaluate(gold, pred, proj, cache=cache) == 1
    one_line_refusal(capsys, str(gold), "inside the output folder")
    assert snapshot(proj) == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("out", [".", "..", "../e"])
def test_out_holding_the_current_folder_is_refused(
    tmp_path, inputs, cache, capsys, monkeypatch, out
):
    """`--out .` in an empty folder moved the user's current folder away (and left a
    `..*.old` folder beside it when that failed)."""
    here = tmp_path / "e"
    here.mkdir()
    monkeypatch.chdir(here)
    gold, pred = inputs
    args = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", out]
    assert cli.main([*args, "--cache", str(cache), "--bootstrap", "0"]) == 1
    one_line_refusal(capsys, "inside the output folder")
    assert here.is_dir() and list(here.iterdir()) == []
    assert leftovers(tmp_path) == [] and leftovers(tmp_path.parent) == []


def test_input_that_an_earlier_run_wrote_is_still_an_input(tmp_path, inputs, cache, capsys):
    """Re-evaluating against OUT/work/inputs/gold.parquet of the last run would delete it."""
    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=cache) == 0
    gold = out / "work" / "inputs" / "gold.parquet"
    before = gold.read_bytes()
    assert evaluate(gold, inputs[1], out, cache=cache) == 1
    one_line_refusal(capsys, f"--gold {gold}")
    assert gold.read_bytes() == before


@pytest.mark.parametrize("option", ["--train-gold", "--dev-gold", "--temp-directory", "--cache"])
def test_every_input_of_the_run_counts(tmp_path, inputs, cache, capsys, option):
    """Not only gold and predictions: any file or folder the run reads or spills into."""
    out = tmp_path / "eval"
    inside = out / "keep" / ("cache" if option == "--cache" else "file.csv")
    inside.parent.mkdir(parents=True)
    if option == "--cache":
        shutil.copytree(cache, inside)
        extra = (option, str(inside))
    else:
        inside.write_text(GOLD)
        extra = (option, str(inside))
    before = snapshot(out)
    gold, pred = inputs
    args = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out)]
    if option != "--cache":
        args += ["--cache", str(cache)]
    assert cli.main([*args, "--bootstrap", "0", *extra]) == 1
    one_line_refusal(capsys, f"{option} {inside}", "inside the output folder")
    assert snapshot(out) == before


def test_input_reached_through_a_symlink_is_seen_inside(tmp_path, cache, capsys):
    """A link outside --out to a gold inside it: the file itself lies in --out."""
    out = tmp_path / "eval"
    (out / "work").mkdir(parents=True)
    (out / "work" / "gold.csv").write_text(GOLD)
    (tmp_path / "gold.csv").symlink_to(out / "work" / "gold.csv")
    (tmp_path / "pred.csv").write_text(PRED)
    assert evaluate(tmp_path / "gold.csv", tmp_path / "pred.csv", out, cache=cache) == 1
    one_line_refusal(capsys, "inside the output folder")
    assert (out / "work" / "gold.csv").read_text() == GOLD


# --- A file created during the run ---------------------------------------------------------


@pytest.mark.parametrize("earlier_run", [True, False])
def test_file_added_during_the_run_is_not_deleted_at_the_swap(
    tmp_path, inputs, cache, capsys, monkeypatch, earlier_run
):
    """The check ran once, at the start: a file saved into --out meanwhile went at the swap."""
    out = tmp_path / "eval"
    if earlier_run:
        assert evaluate(*inputs, out, cache=cache) == 0
    before = snapshot(out) if earlier_run else {}
    real = run.final_reports

    def user_saves_a_file(**kwargs):
        (out / "figures").mkdir(parents=True, exist_ok=True)
        (out / "figures" / "mine.png").write_text("made during the run")
        return real(**kwargs)

    monkeypatch.setattr(run, "final_reports", user_saves_a_file)
    assert evaluate(*inputs, out, cache=cache) == 1
    one_line_refusal(capsys, "figures/mine.png")
    assert (out / "figures" / "mine.png").read_text() == "made during the run"
    after = snapshot(out)
    after.pop("figures/mine.png")
    if not earlier_run:
        after.pop("figures")
    assert after == before  # the earlier outputs are as they were
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("saved", ["work/late.txt", MANIFEST])
def test_file_saved_as_the_folder_is_moved_aside_is_put_back(
    tmp_path, inputs, cache, capsys, monkeypatch, saved
):
    """The last check and the move aside are two steps: a file saved between them (or a
    manifest removed) is caught in the moved folder, which goes back whole."""
    import hieval.atomic as atomic

    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=cache) == 0
    real = os.replace

    def save_then_move(src, dst):
        if Path(src) == out and Path(dst).name == "previous":
            if saved == MANIFEST:
                (out / MANIFEST).unlink()
            else:
                (out / saved).write_text("saved at the last moment")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", save_then_move)
    assert evaluate(*inputs, out, cache=cache) == 1
    one_line_refusal(capsys, f"output folder {out} ", "choose a new --out")
    if saved != MANIFEST:
        assert (out / saved).read_text() == "saved at the last moment"
    assert (out / "metrics.parquet").is_file()
    assert leftovers(tmp_path) == []


# --- A swap that fails half-way -------------------------------------------------------------


def test_failed_swap_puts_the_previous_outputs_back(tmp_path, inputs, cache, capsys, monkeypatch):
    """The previous folder is moved aside first; if the new one cannot take its place, the
    previous outputs go back, and nothing is left beside them."""
    import hieval.atomic as atomic

    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=cache) == 0
    before = snapshot(out)
    real = os.replace

    def failing(src, dst):
        if str(src).endswith(".partial"):
            raise OSError(28, os.strerror(28), str(dst))
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", failing)
    assert evaluate(*inputs, out, cache=cache) == 1
    one_line_refusal(capsys, "No space left on device", str(out))
    assert snapshot(out) == before
    assert leftovers(tmp_path) == []


def test_previous_outputs_that_cannot_go_back_are_kept_and_named(
    tmp_path, inputs, cache, capsys, monkeypatch
):
    """When even putting the previous outputs back fails, they were deleted with the
    folder they had been moved aside to; now they stay there and the message says where."""
    import hieval.atomic as atomic

    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=cache) == 0
    before = snapshot(out)
    real = os.replace

    def failing(src, dst):
        if str(src).endswith(".partial") or Path(src).name == "previous":
            raise OSError(5, os.strerror(5), str(dst))
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", failing)
    assert evaluate(*inputs, out, cache=cache) == 1
    line = one_line_refusal(capsys, "previous outputs")
    (old,) = [p for p in tmp_path.iterdir() if p.name.endswith(".old")]
    assert f"they are in {old / 'previous'}" in line
    assert snapshot(old / "previous") == before


# --- Literal paths ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["o[x]", "o*", "o?", "o[!y]"])
def test_out_with_glob_characters_reads_its_own_intermediates(
    tmp_path, inputs, cache, capsys, name
):
    """`--out 'o[x]'` beside a folder `ox` holding other results must report its own."""
    gold, pred = inputs
    (tmp_path / "decoy.csv").write_text(DECOY)
    assert evaluate(gold, tmp_path / "decoy.csv", tmp_path / "ox", cache=cache) == 0
    assert flat_counts(tmp_path / "ox") == (3, 0, 0)
    capsys.readouterr()
    out = tmp_path / name
    assert evaluate(gold, pred, out, cache=cache) == 0
    assert flat_counts(out) == (1, 0, 2)
    assert f"wrote {out}/metrics.parquet" in capsys.readouterr().err  # not a markup-eaten path
    assert evaluate(gold, pred, out, cache=cache) == 0  # and its own folder is replaced
    assert flat_counts(tmp_path / "ox") == (3, 0, 0)


def test_messages_keep_brackets_of_paths(tmp_path, inputs, cache, capsys):
    """A refusal naming `o[x]` printed `o` (the console took `[x]` for markup)."""
    out = tmp_path / "o[x]"
    out.mkdir()
    (out / "notes[1].txt").write_text("mine")
    assert evaluate(*inputs, out, cache=cache) == 1
    one_line_refusal(capsys, f"{out} is not empty", "'notes[1].txt'")


def test_icd10_cache_with_glob_characters_is_read_literally(tmp_path, icd10_built, capsys):
    """The built ICD-10 tree's leaves were read with a globbing reader: `--cache c[x]`
    failed as a damaged cache (and would read `cx`'s tree beside it)."""
    cache = tmp_path / "c[x]"
    shutil.copytree(icd10_built, cache / "hierarchy" / "icd10")
    (tmp_path / "gold.csv").write_text("doc_id,code\nd1,I10\nd1,E11.9\nd2,J45.909\n")
    (tmp_path / "pred.csv").write_text("doc_id,code\nd1,I10\n")
    code = evaluate(
        tmp_path / "gold.csv",
        tmp_path / "pred.csv",
        tmp_path / "out",
        "--hierarchy",
        "icd10",
        cache=cache,
    )
    assert code == 0, capsys.readouterr().err
    assert flat_counts(tmp_path / "out") == (1, 0, 2)


# --- Writes that fail name the place -------------------------------------------------------


def test_unwritable_cache_is_named(tmp_path, inputs, capsys):
    """A --cache that cannot be written was reported as `cannot write the outputs to OUT`.
    (Its parent is a regular file: that denies even root, as tests may run in CI.)"""
    (tmp_path / "afile").write_text("a file")
    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=tmp_path / "afile" / "cache") == 1
    line = one_line_refusal(capsys, f"in --cache {tmp_path / 'afile' / 'cache'}, (Not a directory)")
    assert "the outputs to" not in line
    assert not out.exists()
    assert leftovers(tmp_path) == []


def test_full_cache_is_named(tmp_path, inputs, capsys):
    """A --cache on a full disk was reported as `cannot write the outputs to OUT`: the
    writer's error named no file, so the table being written is named now (by every atomic
    write: the ICD-10 tree's cache fails the same way, six seconds later)."""
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        out = tmp_path / "eval"
        assert evaluate(*inputs, out, cache=disk / "cache") == 1
        line = one_line_refusal(capsys, f"in --cache {disk / 'cache'}, (No space left on device)")
        assert f"cannot write {disk / 'cache' / 'hierarchy'}" in line
        assert "free some space" in line
        assert not out.exists()


def test_model_name_too_long_for_the_file_system_is_refused_before_any_write(
    tmp_path, inputs, cache, capsys
):
    """A 300-character model name was reported as `cannot write the outputs to OUT`; it is
    refused up front now (names the model's files), before anything is staged."""
    out = tmp_path / "eval"
    with pytest.raises(SystemExit) as stopped:
        evaluate(*inputs, out, cache=cache, name="m" * 300)
    assert stopped.value.code == 2
    assert "longer than 128 characters" in capsys.readouterr().err
    assert not out.exists()
    assert leftovers(tmp_path) == []


# --- Interrupted runs ----------------------------------------------------------------------

#: A run that gets signal ``argv[1]`` from itself once its inputs are read (as from Ctrl-C or
#: a scheduler's kill mid-run), in Python or (``argv[2]`` = duckdb) in a DuckDB query, which
#: turns the signal's exception into its own; then the CLI's arguments.
STOPPED_RUN = """
import os, signal, sys, threading
from hieval import cli, run
count = run.count_and_score
def stop(**kwargs):
    if sys.argv[2] == "duckdb":
        import duckdb
        kill = lambda: os.kill(os.getpid(), getattr(signal, sys.argv[1]))
        threading.Timer(0.3, kill).start()
        query = "SELECT count(*) FROM range(5000000000) t(i) WHERE i % 7 = 3"
        duckdb.connect().execute(query).fetchall()
    else:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    return count(**kwargs)
run.count_and_score = stop
sys.exit(cli.main(sys.argv[3:]))
"""


def stopped_run(
    signal_name: str, inputs, out: Path, cache: Path, during: str = "python"
) -> subprocess.CompletedProcess:
    gold, pred = inputs
    args = ["evaluate", "--gold", gold, "--pred", f"m={pred}", "--out", out, "--cache", cache]
    args += ["--bootstrap", "0"]
    return subprocess.run(
        [sys.executable, "-c", STOPPED_RUN, signal_name, during, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("signal_name", "line", "code"),
    [("SIGINT", "hieval: interrupted", 130), ("SIGTERM", "hieval: terminated", 143)],
)
@pytest.mark.parametrize(
    ("earlier_run", "during"), [(False, "python"), (True, "python"), (False, "duckdb")]
)
def test_interrupted_run_says_so_and_cleans_up(
    tmp_path, inputs, cache, signal_name, line, code, earlier_run, during
):
    """Ctrl-C printed a KeyboardInterrupt traceback; SIGTERM left `.OUT.*.partial/` forever."""
    out = tmp_path / "eval"
    if earlier_run:
        assert evaluate(*inputs, out, cache=cache) == 0
    before = snapshot(out) if earlier_run else None
    done = stopped_run(signal_name, inputs, out, cache, during)
    assert done.returncode == code, done.stderr
    assert done.stderr.strip().splitlines()[-1] == line
    assert "Traceback" not in done.stderr
    assert leftovers(tmp_path) == []
    assert (snapshot(out) if earlier_run else out.exists()) == (before or False)


def dead_pid() -> int:
    """The id of a process that has exited."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def staging_of(pid: int, folder: Path, host: str | None = None) -> Path:
    """A staging folder as a run of process ``pid`` leaves it."""
    folder.mkdir()
    (folder / "work").mkdir()
    (folder / "work" / "gold.parquet").write_text("half written")
    marker = {"pid": pid, "host": host or socket.gethostname()}
    (folder / STAGING_MARKER).write_text(json.dumps(marker))
    return folder


def test_staging_of_a_killed_run_is_removed_by_the_next(tmp_path, inputs, cache):
    """SIGKILL leaves the staging folder; the next run removes it (its owner is dead)."""
    out = tmp_path / "eval"
    done = stopped_run("SIGKILL", inputs, out, cache)
    assert done.returncode == -9
    assert len(leftovers(tmp_path)) == 1
    assert evaluate(*inputs, out, cache=cache) == 0
    assert leftovers(tmp_path) == []
    assert flat_counts(out) == (1, 0, 2)


def test_only_provably_dead_runs_staging_is_removed(tmp_path, inputs, cache):
    """Look-alikes stay: no marker (the user's), a live owner, another machine's run, and a
    dead run's folder holding an input of this run."""
    gold = tmp_path / ".eval.input.partial" / "gold.csv"
    kept = [
        tmp_path / ".eval.mine.partial",
        staging_of(os.getppid(), tmp_path / ".eval.alive.partial"),
        staging_of(dead_pid(), tmp_path / ".eval.elsewhere.partial", host="another-host"),
        staging_of(dead_pid(), gold.parent),
    ]
    kept[0].mkdir()
    (kept[0] / "notes.txt").write_text("mine")
    gold.write_text(GOLD)
    removed = staging_of(dead_pid(), tmp_path / ".eval.dead.partial")
    assert evaluate(gold, inputs[1], tmp_path / "eval", cache=cache) == 0
    assert not removed.exists()
    assert all(folder.is_dir() for folder in kept)
    assert (kept[0] / "notes.txt").read_text() == "mine"


def test_previous_outputs_a_killed_swap_left_aside_come_back(tmp_path, inputs, cache):
    """A run killed between moving OUT aside and moving its staging folder in: the next run
    puts the previous outputs back (then replaces them as its own), never deletes them blind."""
    out = tmp_path / "eval"
    assert evaluate(*inputs, out, cache=cache, name="old") == 0
    old = staging_of(dead_pid(), tmp_path / ".eval.killed.old")
    shutil.rmtree(old / "work")
    os.replace(out, old / "previous")
    (old / "previous" / "work" / "mine.txt").write_text("saved during the dead run")
    assert evaluate(*inputs, out, cache=cache) == 1  # back, holding a file of the user's
    assert (out / "work" / "mine.txt").read_text() == "saved during the dead run"
    assert (out / "nodes" / "old.csv").is_file()
    assert leftovers(tmp_path) == []
