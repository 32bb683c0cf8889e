"""Paths are literal and outputs are whole, met as a user meets them (the CLI and the workflow).

A path with glob characters must read that one file (never a look-alike), and a run that fails
for any reason — a bad input of the last model, a full disk, a read-only folder — leaves no
output set that looks complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from helpers import snakemake

from hieval.cli import main

GOLD = "doc_id,code\nd1,401.9\nd1,96.04\nd2,364.11\n"
#: One hit (401.9), two misses: flat micro TP 1, FP 0, FN 2.
PRED = "doc_id,code\nd1,401.9\n"
#: A decoy that would score every gold label, placed where a glob would find it.
DECOY = "doc_id,code\nd1,401.9\nd1,96.04\nd2,364.11\n"
OUTPUTS = ("metrics.parquet", "metrics.csv", "summary.csv", "summary.md")


def flat_counts(metrics: Path, model: str = "m") -> tuple[float, float, float]:
    """Flat micro TP, FP, FN of ``model`` from a tidy metrics table."""
    tidy = pl.read_parquet(metrics, glob=False).filter(
        (pl.col("model") == model) & (pl.col("family") == "flat") & (pl.col("average") == "micro")
    )
    value = dict(tidy.select("metric", "value").rows())
    return value["tp"], value["fp"], value["fn"]


def evaluate(gold: Path, preds: dict[str, Path], out: Path, *extra: str) -> int:
    args = ["evaluate", "--gold", str(gold), "--out", str(out), *extra]
    for name, path in preds.items():
        args += ["--pred", f"{name}={path}"]
    return main(args)


@contextlib.contextmanager
def tmpfs(mountpoint: Path, *options: str):
    """A small tmpfs (full or read-only disks), or a skip that says why it cannot be made."""
    mountpoint.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): needs root")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)


# --- Literal paths ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["pred[1].csv", "p*.csv", "p?.csv", "~p.csv", "p{a,b}.csv"])
def test_prediction_path_with_glob_characters_reads_that_file(tmp_path, name):
    """`--pred m=pred[1].csv` read pred1.csv when it existed; now it reads pred[1].csv."""
    (tmp_path / "gold.csv").write_text(GOLD)
    (tmp_path / name).write_text(PRED)
    for decoy in ("pred1.csv", "pa.csv", "pb.csv", "p1.csv"):
        (tmp_path / decoy).write_text(DECOY)
    out = tmp_path / "out"
    assert evaluate(tmp_path / "gold.csv", {"m": tmp_path / name}, out) == 0
    assert flat_counts(out / "metrics.parquet") == (1, 0, 2)
    record = json.loads((out / "work/inputs/predictions/m.json").read_text())
    assert record["path"] == str(tmp_path / name)


def test_glob_pattern_matching_other_files_is_not_a_file(tmp_path, capsys):
    """`--pred m=dir/p*.csv` read several files; with no file of that name it is an error."""
    (tmp_path / "gold.csv").write_text(GOLD)
    for decoy in ("pa.csv", "pb.csv"):
        (tmp_path / decoy).write_text(DECOY)
    out = tmp_path / "out"
    assert evaluate(tmp_path / "gold.csv", {"m": tmp_path / "p*.csv"}, out) == 1
    err = capsys.readouterr().err
    assert "p*.csv does not exist" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_gold_and_out_paths_with_glob_characters(tmp_path):
    """A gold goldq[1].parquet used goldq1.parquet, and --out o_g[1] read o_g1's tables."""
    pl.read_csv(GOLD.encode(), infer_schema=False).write_parquet(tmp_path / "goldq[1].parquet")
    decoy_gold = pl.DataFrame({"doc_id": ["d1", "d2"], "code": ["401.9", "364.11"]})
    decoy_gold.write_parquet(tmp_path / "goldq1.parquet")
    (tmp_path / "pred.csv").write_text(PRED)
    (tmp_path / "decoy.csv").write_text(DECOY)
    # An earlier run's folder that a glob o_g[1] would match, holding other numbers.
    assert (
        evaluate(tmp_path / "goldq1.parquet", {"m": tmp_path / "decoy.csv"}, tmp_path / "o_g1") == 0
    )
    out = tmp_path / "o_g[1]"
    assert evaluate(tmp_path / "goldq[1].parquet", {"m": tmp_path / "pred.csv"}, out) == 0
    assert flat_counts(out / "metrics.parquet") == (1, 0, 2)


def test_workflow_reads_paths_with_glob_characters_literally(tmp_path):
    """The same through Snakemake: a gold goldq[1].parquet and predictions pred[1].csv."""
    pl.read_csv(GOLD.encode(), infer_schema=False).write_parquet(tmp_path / "goldq[1].parquet")
    pl.DataFrame({"doc_id": ["d1"], "code": ["401.9"]}).write_parquet(tmp_path / "goldq1.parquet")
    (tmp_path / "pred[1].csv").write_text(PRED)
    (tmp_path / "pred1.csv").write_text(DECOY)
    (tmp_path / "models.tsv").write_text("model\tpredictions\nm\tpred[1].csv\n")
    config = tmp_path / "my.yaml"
    config.write_text("gold: goldq[1].parquet\nmodels: models.tsv\nmax_level: e0\n")
    result = snakemake(tmp_path, "results/my/report/metrics.parquet", "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    assert flat_counts(tmp_path / "results/my/report/metrics.parquet") == (1, 0, 2)


# --- Whole output sets ------------------------------------------------------------------------


def write_inputs(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "gold.csv").write_text(GOLD)
    (tmp_path / "pred.csv").write_text(PRED)
    return tmp_path / "gold.csv", tmp_path / "pred.csv"


def test_reused_out_holds_this_runs_outputs_only(tmp_path):
    """A reused --out kept nodes/*.csv of models no longer evaluated."""
    gold, pred = write_inputs(tmp_path)
    out = tmp_path / "out"
    assert evaluate(gold, {"old": pred, "m": pred}, out) == 0
    assert (out / "nodes/old.csv").exists()
    assert evaluate(gold, {"m": pred}, out) == 0
    assert sorted(p.name for p in (out / "nodes").iterdir()) == ["m.csv"]
    assert not (out / "work/inputs/predictions/old.parquet").exists()
    assert set(pl.read_parquet(out / "metrics.parquet")["model"]) == {"m"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_out_folder_with_foreign_files_is_refused_and_untouched(tmp_path, capsys):
    gold, pred = write_inputs(tmp_path)
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "chapter1.tex").write_text("precious")
    assert evaluate(gold, {"m": pred}, out) == 1
    err = capsys.readouterr().err
    assert "has no record of hieval's own files" in err
    assert "'chapter1.tex'" in err
    assert "Traceback" not in err
    assert [p.name for p in out.iterdir()] == ["chapter1.tex"]


def test_out_naming_an_existing_file(tmp_path, capsys):
    gold, pred = write_inputs(tmp_path)
    (tmp_path / "out").write_text("a file")
    assert evaluate(gold, {"m": pred}, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "out is an existing file" in err
    assert (tmp_path / "out").read_text() == "a file"


def test_failure_keeps_the_previous_outputs_whole(tmp_path, capsys):
    """A failed rerun leaves the earlier complete set as it was, not half replaced."""
    gold, pred = write_inputs(tmp_path)
    out = tmp_path / "out"
    assert evaluate(gold, {"m": pred}, out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    (tmp_path / "bad.csv").write_text("doc_id,code\nd1,4O1.9\n")
    assert evaluate(gold, {"m": pred, "bad": tmp_path / "bad.csv"}, out) == 1
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_every_input_is_validated_before_counting(tmp_path, capsys):
    """A bad file of the last model fails before the first model is counted."""
    gold, pred = write_inputs(tmp_path)
    (tmp_path / "lr.psv").write_text("d1|17|2041\n")  # CAML's LR files hold label indices
    out = tmp_path / "out"
    assert evaluate(gold, {"m": pred, "lr": tmp_path / "lr.psv"}, out) == 1
    err = capsys.readouterr().err
    assert "lr.psv" in err
    assert "counting" not in err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_outputs_honour_the_umask(tmp_path, umask):
    """Every file written atomically was 0600 whatever the umask."""
    gold, pred = write_inputs(tmp_path)
    previous = os.umask(umask)
    try:
        assert evaluate(gold, {"m": pred}, tmp_path / "out") == 0
    finally:
        os.umask(previous)
    out = tmp_path / "out"
    for path in [out, *out.rglob("*")]:
        expected = (0o777 if path.is_dir() else 0o666) & ~umask
        assert path.stat().st_mode & 0o777 == expected, path


def test_full_disk_leaves_nothing(tmp_path, capsys):
    """On a full disk, metrics.parquet and nodes/m.csv were left while summary.* were missing."""
    gold, pred = write_inputs(tmp_path)
    with tmpfs(tmp_path / "disk", "size=256k") as disk:
        assert evaluate(gold, {"m": pred}, disk / "out") == 1
        err = capsys.readouterr().err
        assert "No space left on device" in err
        assert "Traceback" not in err
        assert list(disk.iterdir()) == []


def test_read_only_filesystem(tmp_path, capsys):
    gold, pred = write_inputs(tmp_path)
    with tmpfs(tmp_path / "ro", "size=64k", "ro") as disk:
        assert evaluate(gold, {"m": pred}, disk / "out") == 1
        err = capsys.readouterr().err
        assert "cannot write the output folder" in err
        assert "Read-only file system" in err
        assert "Traceback" not in err


def test_out_in_a_folder_without_write_permission(tmp_path, capsys):
    """--out inside a folder the user cannot write to: one line, no traceback.

    Root ignores permission bits, so as root the CLI runs without the capabilities that let it
    (``setpriv`` drops CAP_DAC_OVERRIDE), as an ordinary user meets the folder.
    """
    gold, pred = write_inputs(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    command = [sys.executable, "-c", "import sys; from hieval.cli import main; sys.exit(main())"]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: cannot drop the permission override")
        drop = "-dac_override,-dac_read_search"
        command = ["setpriv", "--bounding-set", drop, "--inh-caps", drop, *command]
    out = str(locked / "out")
    done = subprocess.run(
        [*command, "evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", out],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    assert f"cannot write the output folder {locked / 'out'} (Permission denied)" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(locked.iterdir()) == []


def test_cli_rechecks_the_pin_of_a_cached_download(tmp_path, capsys):
    """A cached CoPHE graph replaced by `{}` ran with every code placed by syntax."""
    gold, pred = write_inputs(tmp_path)
    cached = tmp_path / "cache/hierarchy/cophe/icd9_graph_desc.json"
    cached.parent.mkdir(parents=True)
    cached.write_text("{}")
    code = evaluate(
        gold,
        {"m": pred},
        tmp_path / "out",
        "--hierarchy",
        "cophe",
        "--cache",
        str(tmp_path / "cache"),
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "icd9_graph_desc.json has sha256" in err
    assert "delete it to download it again" in err
    assert not (tmp_path / "out").exists()
