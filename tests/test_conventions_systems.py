"""Runs of a system under the conventions: conventions_systems.parquet (each convention's mean
and sd with its paper's ddof: Edin et al.'s np.std, ddof 0; hieval's sample sd) and the
``edin`` paper table's mean ± sd cells through the workflow, checked with Python's
``statistics`` module (``pstdev`` is ddof 0, ``stdev`` ddof 1) on conventions.parquet's rows."""

from __future__ import annotations

import statistics

import polars as pl
import pytest
import yaml
from helpers import snakemake
from test_paper_table2 import RECIPE, SHEET, SYSTEMS, _write_caml_files

from hieval.conventions.runs import system_rows


def test_system_rows_use_each_conventions_ddof():
    table = pl.DataFrame(
        {
            "model": ["a1", "a2", "a3"] * 3 + ["solo"],
            "convention": ["edin"] * 3 + ["hieval"] * 3 + ["caml"] * 3 + ["edin"],
            "metric": ["f1_micro"] * 10,
            "value": [0.5, 0.6, 0.8, 0.5, 0.6, 0.8, 0.5, 0.6, 0.8, 0.1],
        }
    )
    rows = system_rows(table, {"a1": "A", "a2": "A", "a3": "A"})
    by = {r["convention"]: r for r in rows.iter_rows(named=True)}
    assert set(by) == {"edin", "hieval", "caml"}  # solo has no system
    runs = [0.5, 0.6, 0.8]
    assert by["edin"]["sd"] == pytest.approx(statistics.pstdev(runs), abs=1e-15)
    assert by["edin"]["ddof"] == 0
    assert by["hieval"]["sd"] == pytest.approx(statistics.stdev(runs), abs=1e-15)
    assert by["caml"]["sd"] is None and by["caml"]["ddof"] is None
    assert all(r["mean"] == pytest.approx(statistics.fmean(runs)) for r in by.values())
    assert {r["runs"] for r in by.values()} == {3}


def test_workflow_edin_table_and_conventions_systems(tmp_path, icd9_leaves):
    _write_caml_files(tmp_path, icd9_leaves, runs=2)
    sheet = pl.read_csv(SHEET, separator="\t").filter(
        pl.col("model").str.ends_with("run01") | pl.col("model").str.ends_with("run02")
    )
    sheet.write_csv(tmp_path / "runs.tsv", separator="\t")
    config = yaml.safe_load(RECIPE.read_text())
    config.update(models="runs.tsv", report={"paper_table": "edin"})
    (tmp_path / "edin.yaml").write_text(yaml.safe_dump(config))
    result = snakemake(tmp_path, "--configfile", str(tmp_path / "edin.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]

    report = tmp_path / "results/edin/report"
    conventions = pl.read_parquet(report / "conventions.parquet")
    system_of = dict(sheet.select("model", "system").iter_rows())
    runs: dict[str, list[float]] = {}
    for model, value in (
        conventions.filter(convention="edin", metric="f1_micro")
        .select("model", "value")
        .iter_rows()
    ):
        runs.setdefault(system_of[model], []).append(value)
    assert sorted(runs) == sorted(SYSTEMS) and {len(v) for v in runs.values()} == {2}

    markdown = (report / "tables.md").read_text()
    assert "Edin et al. (2023) layout" in markdown
    header = next(line for line in markdown.splitlines() if line.startswith("| Model"))
    at = header.split(" | ").index("F1 Micro")
    cells = {}
    for line in markdown.splitlines():
        parts = [c.strip().strip("*") for c in line.strip("|").split("|")]
        if parts[0] in SYSTEMS:
            cells[parts[0]] = parts[at]
    order = sorted(SYSTEMS, key=lambda s: statistics.fmean(runs[s]))
    assert list(cells) == order  # micro F1 ascending, as their script sorts
    for system, values in runs.items():
        scaled = [100 * v for v in values]
        expected = f"{statistics.fmean(scaled):.1f} ± {statistics.pstdev(scaled):.1f}"
        assert cells[system] == expected, system

    bysystem = pl.read_parquet(report / "conventions_systems.parquet")
    for system, values in runs.items():
        row = bysystem.filter(system=system, convention="edin", metric="f1_micro").row(
            0, named=True
        )
        assert row["runs"] == 2 and row["ddof"] == 0
        assert row["mean"] == pytest.approx(statistics.fmean(values), abs=1e-12)
        assert row["sd"] == pytest.approx(statistics.pstdev(values), abs=1e-12)
