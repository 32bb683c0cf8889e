"""The SLURM profile on a real single-node SLURM cluster started for the test (no accounting
database): the documented command (docs/workflow.md) runs the demo as batch jobs, every job
asks for memory and wall time, and the report equals a local run byte for byte.

Needs root, the Debian packages slurmctld, slurmd, slurm-client and munge, and the SLURM
executor plugin (``HIEVAL_SLURM_PLUGIN_PATH`` or the ``slurm`` extra; see
``helpers.slurm_plugin_env``); .ci/run provides all three. Skipped, saying why, where SLURM cannot
be started. With HIEVAL_REQUIRE_SLURM=1 (set by .ci/run) it fails instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import tomllib

import pytest
from helpers import (
    REPO,
    REQUIRE_SLURM,
    SNAKEMAKE,
    slurm_plugin_env,
    small_demo_config,
    snakemake,
)

CLUSTER = REPO / "tests/slurm/cluster.sh"
OUTPUTS = (
    "results/report/metrics.parquet",
    "results/report/metrics.csv",
    "results/report/summary.csv",
    "results/report/summary.md",
    "results/report/nodes/over_predictor.csv",
    "results/paper/table1.md",
)


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory):
    """A running cluster's slurm.conf; the daemons are stopped, by PID, afterwards."""
    slurm_plugin_env()  # skips (or fails) before starting daemons the tests could not use
    state = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(
        ["bash", str(CLUSTER), "start", str(state)], capture_output=True, text=True, timeout=180
    )
    try:
        if started.returncode != 0:
            reason = f"SLURM cannot be started here: {started.stderr.strip()}"
            if REQUIRE_SLURM or started.returncode != 2:  # 2: not installed, not root, taken
                pytest.fail(reason)
            pytest.skip(reason)
        yield state / "slurm.conf"
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], timeout=120, check=False)


def run_on_cluster(work, slurm_conf, *args, timeout):
    """The documented SLURM command (docs/workflow.md) in ``work``, verbose (it prints every
    sbatch call)."""
    return subprocess.run(
        [
            str(SNAKEMAKE),
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(work),
            "--profile",
            str(REPO / "profiles/slurm"),
            "--default-resources",
            "slurm_partition=debug",
            "slurm_account=root",
            *args,
            "--config",
            "shards=2",
            "--verbose",
        ],
        capture_output=True,
        text=True,
        cwd=work,
        env={**slurm_plugin_env(), "SLURM_CONF": str(slurm_conf)},
        timeout=timeout,  # a hang fails in minutes; the fixture cancels what was submitted
    )


def test_without_accounting_sacct_fails_fast(slurm_conf, tmp_path):
    """The plugin's default status command (sacct) cannot work without slurmdbd: the run stops
    before it submits anything and names the flag, instead of waiting forever."""
    shutil.copytree(REPO / "config", tmp_path / "config")
    result = run_on_cluster(tmp_path, slurm_conf, timeout=120)
    assert result.returncode != 0
    assert "--slurm-status-command squeue" in result.stderr
    assert "sbatch call" not in result.stderr


def test_demo_on_slurm_equals_local_run(slurm_conf, tmp_path):
    local, cluster = tmp_path / "local", tmp_path / "slurm"
    for work in (local, cluster):
        # The orchestration is under test: 300 documents and two models (one scored, one
        # not) are enough, and every job in a group costs about 2 s on the cluster.
        small_demo_config(work, models=("over_predictor", "cautious_coder"), plain=True)
    result = snakemake(local, "--config", "shards=2")
    assert result.returncode == 0, result.stderr[-3000:]

    began = time.monotonic()
    result = run_on_cluster(
        cluster,
        slurm_conf,
        "--slurm-status-command",
        "squeue",
        # The plugin first checks job states this long after a submission, then 10 s later
        # each time none has finished (1, 11, 21 s ...), and ignores
        # --seconds-between-status-checks: with its default (40 s) or even 5 s, a finished
        # group is noticed up to 26 s late, which was 45 s of this test's 100 s.
        "--slurm-init-seconds-before-status-checks",
        "1",
        timeout=480,
    )
    seconds = time.monotonic() - began
    assert result.returncode == 0, result.stderr[-5000:]

    calls = re.findall(r"^sbatch call: (sbatch .*?) --wrap=", result.stderr, re.MULTILINE)
    print(f"SLURM run: {len(calls)} sbatch submissions in {seconds:.0f} s")
    # 1 prepare group, 1 per-model group, 2 shards x 2 models counted, 1 post-count group.
    assert len(calls) == 7, "\n".join(calls)
    for call in calls:
        assert re.search(r" -t \d+ ", call), f"submitted without a wall time: {call}"
        assert re.search(r" --mem \d+ ", call), f"submitted without memory: {call}"
        cpus = int(re.search(r"--cpus-per-task=(\d+)", call).group(1))
        assert cpus <= 2, f"asks for more CPUs than a 2-CPU node has: {call}"

    for output in OUTPUTS:
        assert (cluster / output).read_bytes() == (local / output).read_bytes(), output


def test_ci_installs_the_plugin_with_the_slurm_extras_pins():
    """.ci/run installs the plugin in a folder of its own, with the `slurm` extra's pins; the
    test extra leaves it out (else every Snakemake start in the suite would import it)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = extras["optional-dependencies"]
    ci = (REPO / ".ci/run").read_text()
    assert extras["slurm"] and all(pin in ci for pin in extras["slurm"]), extras["slurm"]
    assert not [pin for pin in extras["test"] if "slurm" in pin]
