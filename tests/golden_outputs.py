"""Byte-identical output fixtures: what a refactor must not change.

Two runs are kept under ``tests/golden/``: a scored, tuned, bootstrapped zoo through the CLI
(``zoo/``: every file of its ``--out`` but the manifest, which holds inodes and times, and
the hierarchy tables, which are the package's), and the workflow's small demo (``demo/``: its
report files). ``tests/test_golden.py`` runs both again and compares bytes.

When a change is *meant* to change outputs (a new metric row, a new report section), run
``python tests/golden_outputs.py`` and commit the new fixtures in their own commit, saying in
its message what changed and why the old rows still stand (``git diff --stat`` of the
fixtures shows which files moved).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
INPUTS = GOLDEN / "inputs"
MODELS = ("over_predictor", "distant_guesser", "cautious_coder", "sibling_confuser")
TUNED = ("over_predictor", "distant_guesser")

#: The demo's files compared (the rest of results/ is Snakemake's and the history's).
DEMO_FILES = (
    "results/report/metrics.parquet",
    "results/report/summary.csv",
    "results/report/summary.md",
    "results/report/tables.md",
    "results/report/tables.tex",
    "results/report/report.html",
    *(f"results/report/nodes/{m}.csv" for m in MODELS),
    "results/paper/table1.md",
)


def zoo_arguments(out: Path, cache: Path) -> list[str]:
    """The CLI arguments of the golden zoo, paths relative to ``INPUTS`` (run from there, so
    the input records, which name their files, are the same on every machine)."""
    arguments = ["evaluate", "--gold", "test_gold.csv", "--out", str(out), "--cache", str(cache)]
    for model in MODELS:
        arguments += ["--pred", f"{model}=test_{model}.csv"]
    arguments += ["--dev-gold", "dev_gold.csv", "--threshold", "tune"]
    for model in TUNED:
        arguments += ["--dev-pred", f"{model}=dev_{model}.csv"]
    arguments += ["--train-gold", "train_gold.csv", "--k", "5", "8"]
    return [*arguments, "--bootstrap", "100", "--permutations", "100", "--seed", "7"]


def zoo_files(out: Path) -> list[str]:
    """The compared files of a zoo run: all but the manifest and the hierarchy tables."""
    return sorted(
        str(path.relative_to(out))
        for path in out.rglob("*")
        if path.is_file()
        and path.name != ".hieval-manifest.json"
        and "hierarchy" not in path.relative_to(out).parts
    )


def _copy(files: list[str], source: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    for name in files:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, target / name)


def regenerate() -> None:
    """Run both again and replace the fixtures with their outputs."""
    import os

    from hieval.cli import main

    sys.path.insert(0, str(HERE))
    from helpers import small_demo_config, snakemake

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "zoo"
        here = Path.cwd()
        os.chdir(INPUTS)
        try:
            assert main(zoo_arguments(out, Path(tmp) / "cache")) == 0
        finally:
            os.chdir(here)
        _copy(zoo_files(out), out, GOLDEN / "zoo")
        work = Path(tmp) / "demo"
        work.mkdir()
        small_demo_config(work)
        result = snakemake(work)
        assert result.returncode == 0, result.stderr[-3000:]
        _copy(list(DEMO_FILES), work, GOLDEN / "demo")


if __name__ == "__main__":
    regenerate()
