"""Time the default demo (`snakemake --cores 2`) as a fresh clone runs it.

    python benchmarks/demo_time.py [--repeat 3] [--cores 2] [--repo PATH]

Each run exports the checkout's committed tree (``git archive HEAD``: no results, no cached
hierarchy, no compiled numba cache) to a new temporary folder and runs the shipped config
there with this interpreter's Snakemake, the exported ``hieval`` first on ``PYTHONPATH`` so its
code, not an installed copy, is what runs (and what numba compiles). It prints the wall time,
the CPU time of Snakemake and its jobs, and the load average before and after: the figure is
only worth writing down (benchmarks/RESULTS.md) when the machine was quiet; on a busy one,
alternate runs of two commits (``--repo`` another checkout, e.g. main) and compare them. Not a
test: the machine's load decides the number.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def export_head(target: Path, repo: Path = REPO) -> str:
    """The committed tree of ``repo``'s HEAD in ``target``; returns the commit's short hash."""
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "HEAD"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return commit


def run_demo(folder: Path, cores: int) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, Snakemake and every job) of one demo run."""
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    snakemake = Path(sys.executable).with_name("snakemake")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(
        [str(snakemake), "-s", str(folder / "Snakefile"), "-d", str(folder),
         "--cores", str(cores), "-q"],
        cwd=folder, env=env, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"the demo failed in {folder}:\n{result.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose HEAD runs")
    args = parser.parse_args()
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="hieval-demo-") as tmp:
            folder = Path(tmp)
            commit = export_head(folder, args.repo)
            load = os.getloadavg()
            wall, cpu = run_demo(folder, args.cores)
            after = os.getloadavg()
            print(
                f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, commit {commit}: "
                f"demo {wall:.2f} s wall, {cpu:.1f} s CPU on {args.cores} cores; load "
                f"{load[0]:.1f} before, {after[0]:.1f} after"
            )


if __name__ == "__main__":
    main()
