"""The uncertainty job asks a cluster for wall time that grows with its permutations and
replicates (a SLURM job past its request is killed)."""

from __future__ import annotations

import re

from helpers import small_demo_config, snakemake


def uncertainty_runtime(workdir, settings: str) -> int:
    config = workdir / "uncertainty.yaml"
    config.write_text(settings)
    result = snakemake(workdir, "-n", "--configfile", str(config), quiet=False)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    block = out[out.index("rule uncertainty:") :]
    return int(re.search(r"resources:.*?runtime=(\d+)", block, re.S).group(1))


def test_runtime_grows_with_permutations_and_replicates(tmp_path):
    small_demo_config(tmp_path)  # 4 demo models: 6 pairs
    few = uncertainty_runtime(tmp_path, "uncertainty: {bootstrap: 100, permutations: 99}\n")
    many = uncertainty_runtime(tmp_path, "uncertainty: {bootstrap: 1000, permutations: 9999}\n")
    # A dry run has no inputs on disk: the 10-minute floor, plus one minute per pair and
    # 5,000 permutations and per model and 5,000 replicates, rounded up.
    assert few == 10 + 1  # ceil(6 * 99 / 5000 + 4 * 100 / 5000)
    assert many == 10 + 13  # ceil(6 * 9999 / 5000 + 4 * 1000 / 5000)
