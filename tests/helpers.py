"""Helpers shared by the tests that run the workflow for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


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
