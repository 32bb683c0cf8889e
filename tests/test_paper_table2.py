"""The CoPHE paper's Table 2 recipe (config/paper/cophe_table2.yaml): runs of a system become one
row holding their mean, checked against a naive count of synthetic top-50 files.

The reference is tests/test_counts_reference.py's plain-Python counter (sets and Counters over
the level table's rows); the means are taken here with the statistics module."""

from __future__ import annotations

import random
import re
import statistics
from pathlib import Path

import polars as pl
import pytest
import yaml
from helpers import REPO, snakemake
from test_counts_reference import _prf, naive_ancestor_map, naive_counts

from hieval.reports.paper_tables import paper_tables, to_latex, to_markdown

RECIPE = REPO / "config" / "paper" / "cophe_table2.yaml"
SHEET = REPO / "config" / "paper" / "cophe_table2_models.tsv"
SYSTEMS = ("CAML", "BGLWAN", "HLAN")
LEVELS = ("e2", "e1", "e0", "c")


def test_the_shipped_recipe_lists_ten_runs_of_each_system():
    config = yaml.safe_load(RECIPE.read_text())
    assert config["models"] == "config/paper/cophe_table2_models.tsv"
    assert config["gold_format"] == "caml_gold"
    sheet = pl.read_csv(SHEET, separator="\t")
    assert sheet.height == 30
    assert sheet.group_by("system").len().sort("system").rows() == sorted((s, 10) for s in SYSTEMS)
    assert sheet["model"].n_unique() == 30
    assert all(p.startswith("data/cophe_table2/") for p in sheet["predictions"])
    ignored = (REPO / ".gitignore").read_text().split()
    assert "data/" in ignored, "MIMIC files must never be committed"


def _tidy(values: dict[str, float]) -> pl.DataFrame:
    rows = []
    for model, f1 in values.items():
        for family, level in (("flat", "leaf"), ("set", "overall"), ("cophe", "overall")):
            for metric in ("precision", "recall", "f1"):
                rows.append((model, family, level, "micro", metric, f1))
    return pl.DataFrame(
        rows, schema=["model", "family", "level", "average", "metric", "value"], orient="row"
    )


def test_a_system_row_is_the_mean_of_its_runs_and_other_models_stay_rows():
    tidy = _tidy({"a1": 0.5, "a2": 0.6, "a3": 0.7, "b1": 0.55, "solo": 0.1})
    systems = {"a1": "A", "a2": "A", "a3": "A", "b1": "B"}
    headline, _ = paper_tables(
        tidy, levels=(), models=["a1", "a2", "b1", "a3", "solo"], systems=systems
    )
    assert [name for name, _ in headline.rows] == ["A", "B", "solo"]
    assert headline.rows[0][1][0] == pytest.approx(0.6)
    assert headline.rows[1][1][0] == pytest.approx(0.55)
    assert "each system's runs (A: 3, B: 1)" in headline.caption
    # A's mean (60.0) beats B (55.0): bold in both renderings, and B's is not.
    markdown = to_markdown([headline])
    assert re.search(r"^\| A \| \*\*60\.0\*\*", markdown, re.M)
    assert re.search(r"^\| B \| 55\.0 \|", markdown, re.M)
    assert "A & \\textbf{60.0}" in to_latex([headline])


def _write_caml_files(root: Path, leaves: list[str], runs: int) -> tuple[dict, dict]:
    """A top-50 gold (caml_gold) and ``runs`` runs per system (caml_psv) under ``root``;
    returns gold {doc: codes} and predictions {model: {doc: codes}}."""
    rng = random.Random(20211107)
    top50 = rng.sample(leaves, 50)
    docs = [str(100000 + i) for i in range(60)]
    gold = {d: set(rng.sample(top50, rng.randint(1, 8))) for d in docs}
    lines = ["SUBJECT_ID,HADM_ID,TEXT,LABELS"]
    lines += [f'{i},{d},"note {i}",{";".join(sorted(gold[d]))}' for i, d in enumerate(docs)]
    (root / "data/mimic3_top50").mkdir(parents=True)
    (root / "data/mimic3_top50/test_50.csv").write_text("\n".join(lines) + "\n")
    predictions = {}
    for quality, system in zip((0.8, 0.6, 0.4), SYSTEMS, strict=True):
        (root / "data/cophe_table2" / system).mkdir(parents=True)
        for run in range(1, runs + 1):
            pred = {}
            for d in docs:
                kept = {c for c in gold[d] if rng.random() < quality}
                pred[d] = kept | set(rng.sample(top50, rng.randint(0, 3)))
            model = f"{system}_run{run:02d}"
            predictions[model] = pred
            path = root / "data/cophe_table2" / system / f"run{run:02d}.psv"
            path.write_text("".join(f"{d}|{'|'.join(sorted(pred[d]))}\n" for d in docs))
    return gold, predictions


def test_the_recipe_regenerates_table2_as_means_over_runs(tmp_path, icd9, icd9_leaves):
    """Through Snakemake with the shipped recipe (a smaller sheet of 2 runs per system, same
    layout): every cell of Table 2 is the mean over a system's runs of a naive count."""
    gold, predictions = _write_caml_files(tmp_path, icd9_leaves, runs=2)
    sheet = pl.read_csv(SHEET, separator="\t").filter(
        pl.col("model").str.ends_with("run01") | pl.col("model").str.ends_with("run02")
    )
    sheet.write_csv(tmp_path / "runs.tsv", separator="\t")
    result = snakemake(tmp_path, "--configfile", str(RECIPE), "--config", "models=runs.tsv")
    assert result.returncode == 0, result.stderr[-3000:]

    codes = set().union(*gold.values(), *(c for p in predictions.values() for c in p.values()))
    anc = naive_ancestor_map(icd9.frame, codes)
    expected = {}  # system -> column -> [value per run]
    for model, pred in predictions.items():
        nodes, _ = naive_counts(gold, pred, anc, levels=LEVELS)
        for family in ("flat", "set", "cophe"):
            counts = [c for (f, _level, _node), c in nodes.items() if f == family]
            tp, fp, fn = (sum(c[i] for c in counts) for i in range(3))
            for metric, value in zip(("P", "R", "F1"), _prf(tp, fp, fn)[:3], strict=True):
                system = model.split("_")[0]
                expected.setdefault(system, {}).setdefault((family, metric), []).append(value)

    markdown = (tmp_path / "results/cophe_table2/report/tables.md").read_text()
    assert "mean over 2 runs of each system" in markdown
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        if cells[0] in SYSTEMS and cells[0] not in rows:  # Table 2 comes first
            rows[cells[0]] = cells[1:]
    assert list(rows) == list(SYSTEMS)
    columns = [(f, m) for f in ("flat", "set", "cophe") for m in ("P", "R", "F1")]
    for system in SYSTEMS:
        means = [statistics.fmean(expected[system][c]) for c in columns]
        assert rows[system] == [f"{100 * v:.1f}" for v in means], system
    # The best system per column is bold: CAML keeps 80% of the gold codes, the others less.
    assert re.search(r"^\| CAML \| \*\*", markdown, re.M)
    tex = (tmp_path / "results/cophe_table2/report/tables.tex").read_text()
    assert "CAML & \\textbf{" in tex and "HLAN & " in tex
    systems = pl.read_parquet(tmp_path / "results/cophe_table2/report/systems.parquet")
    flat_f1 = systems.filter(
        (pl.col("family") == "flat") & (pl.col("average") == "micro") & (pl.col("metric") == "f1")
    )
    for system in SYSTEMS:
        row = flat_f1.filter(pl.col("system") == system).row(0, named=True)
        runs = expected[system]["flat", "F1"]
        assert row["runs"] == 2
        assert row["mean"] == pytest.approx(statistics.fmean(runs), abs=1e-12)
        assert row["sd"] == pytest.approx(statistics.stdev(runs), abs=1e-12)
