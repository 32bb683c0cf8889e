"""Issue 30, round three, through Snakemake: no output of an earlier configuration survives
beside new results; a damaged history is refused before the report job can lose the previous
report."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from helpers import copy_run, snakemake
from test_uncertainty_workflow import UNCERTAINTY, write_zoo

REPORT = Path("results/report")


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory) -> Path:
    """Three models (two runs of one system) with a small bootstrap, run once by Snakemake;
    tests copy it (copy_run) and change something."""
    work = tmp_path_factory.mktemp("round3")
    config = write_zoo(work)
    config.write_text(
        config.read_text().replace(UNCERTAINTY, "")
        + "uncertainty:\n  bootstrap: 20\n  permutations: 9\n"
    )
    result = snakemake(work, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("intervals.parquet", "comparisons.parquet", "systems.parquet", "nodes/poor.csv"):
        assert (work / REPORT / name).is_file(), name
    return work


def test_no_output_of_an_earlier_configuration_survives(zoo_run, tmp_path):
    work = copy_run(zoo_run, tmp_path)
    mine = work / REPORT / "my notes.txt"
    mine.write_text("the user's own file\n")
    config = work / "my.yaml"
    config.write_text(config.read_text().replace("bootstrap: 20", "bootstrap: 0"))
    # `poor` leaves the zoo and the sheet loses its system column
    (work / "models.tsv").write_text("model\tpredictions\ngood1\tgood1.csv\ngood2\tgood2.csv\n")
    result = snakemake(work, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("intervals.parquet", "comparisons.parquet", "systems.parquet", "nodes/poor.csv"):
        assert not (work / REPORT / name).exists(), name
    assert "How sure are we" not in (work / REPORT / "summary.md").read_text()
    assert set(pl.read_parquet(work / REPORT / "metrics.parquet")["model"]) == {"good1", "good2"}
    assert (work / REPORT / "nodes/good1.csv").is_file()
    assert mine.read_text() == "the user's own file\n"  # not hieval's: never touched


def test_damaged_history_is_refused_and_the_report_survives(zoo_run, tmp_path):
    work = copy_run(zoo_run, tmp_path)
    history = work / "results/history/evaluations.parquet"
    history.write_bytes(history.read_bytes()[:-40])  # truncated: no footer
    before = {p: p.read_bytes() for p in (work / REPORT).rglob("*") if p.is_file()}
    result = snakemake(work, "--configfile", "my.yaml", "--forcerun", "report")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if str(history.name) in line]
    assert lines and "move it aside" in lines[0], result.stderr[-2000:]
    after = {p: p.read_bytes() for p in (work / REPORT).rglob("*") if p.is_file()}
    assert after == before  # the previous report is whole
    assert history.stat().st_size > 0  # and the damaged history is left for the user
