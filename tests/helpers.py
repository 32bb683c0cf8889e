"""Helpers shared by the tests that run the workflow for real."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from hieval.config import load_workflow_config
from hieval.errors import HievalError

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
SCHEMAS = REPO / "workflow" / "schemas"


def snakemake(workdir: Path, *args: str, quiet: bool = True) -> subprocess.CompletedProcess:
    """Run the repository's Snakefile in ``workdir`` (never in the checkout)."""
    return subprocess.run(
        # --quiet takes several values, so it goes last, after any target in ``args``.
        [
            str(SNAKEMAKE),
            *args,
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(workdir),
            "--cores",
            "2",
            *(["--quiet", "progress", "rules", "host"] if quiet else []),
        ],
        capture_output=True,
        text=True,
        cwd=workdir,
        timeout=300,
    )


def copy_run(finished: Path, workdir: Path) -> Path:
    """A copy of a finished workflow run (inputs, results and Snakemake's metadata, with their
    times), so a test can change it and see what Snakemake reruns without running it all again.
    """
    shutil.copytree(finished, workdir, symlinks=True, dirs_exist_ok=True)
    return workdir


def small_demo_config(
    workdir: Path, documents: int = 300, models: tuple[str, ...] | None = None
) -> None:
    """The shipped config/ in ``workdir``, with a smaller demo (the default target runs it);
    ``models`` keeps only those rows of the model sheet."""
    shutil.copytree(REPO / "config", workdir / "config")
    config = workdir / "config" / "config.yaml"
    text = config.read_text()
    assert "documents: 2000" in text
    config.write_text(text.replace("documents: 2000", f"documents: {documents}"))
    if models is not None:
        sheet = workdir / "config" / "models.tsv"
        header, *rows = sheet.read_text().splitlines(keepends=True)
        kept = [row for row in rows if row.split("\t", 1)[0] in models]
        assert len(kept) == len(models), f"{models} are not all demo models"
        sheet.write_text(header + "".join(kept))


def parse_time_refusal(workdir: Path, config: Path) -> str:
    """The message the workflow stops with before any job, for ``snakemake --configfile
    CONFIG`` in ``workdir``: the check ``common.smk`` runs (``load_workflow_config``), called
    in-process on the config as Snakemake reads it (YAML). Tests that run Snakemake itself on
    such a config (tests/test_workflow.py, tests/test_bad_config.py) show that this message is
    what the user sees, alone, with a non-zero exit and nothing written."""
    settings = yaml.safe_load(config.read_text("utf-8")) or {}
    with contextlib.chdir(workdir):
        try:
            load_workflow_config(settings, SCHEMAS)
        except HievalError as exc:
            return str(exc)
    raise AssertionError(f"{config} was accepted")
