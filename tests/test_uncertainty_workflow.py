"""Intervals and comparisons through Snakemake and the CLI: byte-identical across shard counts
and reruns, the same tables from both, and the sheet's `system` column in the report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import snakemake

from hieval.cli import main
from hieval.metrics.uncertainty.tables import COMPARISON_COLUMNS, INTERVAL_COLUMNS

CODES = ["364.11", "364.24", "364.9", "401.9", "96.04", "250.00", "428.0", "584.9", "V58.11"]
UNCERTAINTY = "uncertainty:\n  bootstrap: 200\n  permutations: 99\n  seed: 3\n"


def write_zoo(workdir: Path) -> Path:
    """A gold of 40 documents and three models (two runs of one system), sheet and config."""
    rng = np.random.default_rng(1)
    gold = [(f"doc{d:02d}", c) for d in range(40) for c in rng.choice(CODES, 3, replace=False)]
    pl.DataFrame(gold, schema=["doc_id", "code"], orient="row").write_csv(workdir / "gold.csv")
    for name, keep in (("good1", 0.9), ("good2", 0.85), ("poor", 0.4)):
        rows = [(d, c) for d, c in gold if rng.random() < keep]
        rows += [(f"doc{d:02d}", rng.choice(CODES)) for d in range(0, 40, 3)]
        frame = pl.DataFrame(rows, schema=["doc_id", "code"], orient="row").unique()
        frame.sort("doc_id", "code").write_csv(workdir / f"{name}.csv")
    (workdir / "models.tsv").write_text(
        "model\tpredictions\tsystem\n"
        "good1\tgood1.csv\tgood\n"
        "good2\tgood2.csv\tgood\n"
        "poor\tpoor.csv\t\n"
    )
    config = workdir / "my.yaml"
    config.write_text("gold: gold.csv\nmodels: models.tsv\nmax_level: e0\n" + UNCERTAINTY)
    return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The zoo through the workflow with 1 and 2 shards, and through the CLI."""
    base = tmp_path_factory.mktemp("uncertainty")
    outputs = {}
    for shards in (1, 2):
        work = base / f"shards{shards}"
        work.mkdir()
        config = write_zoo(work)
        config.write_text(config.read_text() + f"shards: {shards}\n")
        result = snakemake(work, "--configfile", str(config))
        assert result.returncode == 0, result.stderr[-3000:]
        outputs[shards] = work / "results" / "my" / "report"
    cli = base / "cli"
    cli.mkdir()
    write_zoo(cli)
    args = ["evaluate", "--gold", str(cli / "gold.csv"), "--out", str(cli / "out")]
    for name in ("good1", "good2", "poor"):
        args += ["--pred", f"{name}={cli / name}.csv"]
    args += ["--max-level", "e0", "--bootstrap", "200", "--permutations", "99", "--seed", "3"]
    assert main(args) == 0
    outputs["cli"] = cli / "out"
    return outputs


def test_tables_have_their_columns_and_a_row_per_metric(runs):
    report = runs[1]
    intervals = pl.read_parquet(report / "intervals.parquet")
    comparisons = pl.read_parquet(report / "comparisons.parquet")
    tidy = pl.read_parquet(report / "metrics.parquet")
    assert intervals.columns == list(INTERVAL_COLUMNS)
    assert comparisons.columns == list(COMPARISON_COLUMNS)
    assert intervals.select(tidy.columns).equals(tidy)  # every tidy row, its value unchanged
    assert (intervals["replicates"] == 200).all()
    assert (intervals["low"] <= intervals["high"]).all()
    pairs = set(comparisons.select("model_a", "model_b").iter_rows())
    assert pairs == {("good1", "good2"), ("good1", "poor"), ("good2", "poor")}
    assert comparisons.height == 3 * tidy.filter(pl.col("model") == "poor").height
    assert (comparisons["p_value"] >= 1 / 100).all()
    assert (comparisons["p_adjusted"] >= comparisons["p_value"]).all()
    # Holm over the three pairs of a metric: the smallest p is multiplied by 3 (or capped).
    one = comparisons.filter(
        (pl.col("family") == "flat") & (pl.col("average") == "micro") & (pl.col("metric") == "f1")
    ).sort("p_value")
    assert one["p_adjusted"][0] == pytest.approx(min(1.0, 3 * one["p_value"][0]))
    poor = one.filter(pl.col("model_b") == "poor")
    assert (poor["difference"] > 0).all() and (poor["p_adjusted"] < 0.05).all()


def test_byte_identical_across_shard_counts(runs):
    for name in ("intervals.parquet", "comparisons.parquet", "summary.md", "systems.parquet"):
        one, two = ((runs[s] / name).read_bytes() for s in (1, 2))
        assert one == two, f"{name} differs between 1 and 2 shards"


def test_cli_gives_the_workflows_tables(runs):
    for name in ("intervals.parquet", "comparisons.parquet"):
        workflow = pl.read_parquet(runs[1] / name)
        cli = pl.read_parquet(runs["cli"] / name)
        assert cli.equals(workflow), name


def test_rerun_with_the_same_seed_is_byte_identical(runs, tmp_path):
    """The CLI again, into another folder: the same bytes as the first CLI run."""
    source = runs["cli"].parent
    args = ["evaluate", "--gold", str(source / "gold.csv"), "--out", str(tmp_path / "again")]
    for name in ("good1", "good2", "poor"):
        args += ["--pred", f"{name}={source / name}.csv"]
    args += ["--max-level", "e0", "--bootstrap", "200", "--permutations", "99", "--seed", "3"]
    assert main(args) == 0
    for name in ("intervals.parquet", "comparisons.parquet"):
        assert (tmp_path / "again" / name).read_bytes() == (runs["cli"] / name).read_bytes()


def test_summary_shows_intervals_marks_and_system_runs(runs):
    summary = (runs[1] / "summary.md").read_text()
    assert "## How sure are we" in summary
    assert "| good1 | poor |" in summary and "**" in summary  # a significant difference
    assert "## Runs of one system" in summary
    systems = pl.read_parquet(runs[1] / "systems.parquet")
    assert set(systems["system"]) == {"good"}  # `poor` has no system
    tidy = pl.read_parquet(runs[1] / "metrics.parquet")
    key = (pl.col("family") == "cophe") & (pl.col("level") == "overall")
    key &= (pl.col("average") == "micro") & (pl.col("metric") == "f1")
    a, b = (tidy.filter(key & (pl.col("model") == m))["value"].item() for m in ("good1", "good2"))
    row = systems.filter(key).row(0, named=True)
    assert row["runs"] == 2
    assert row["mean"] == pytest.approx((a + b) / 2)
    assert row["sd"] == pytest.approx(abs(a - b) / np.sqrt(2))  # n - 1 in the denominator
    assert f"{100 * row['mean']:.1f} ± {100 * row['sd']:.1f}" in summary


def test_off_by_default_writes_no_uncertainty_files(tmp_path, example_files):
    gold, pred = example_files
    assert (
        main(["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(tmp_path / "o")])
        == 0
    )
    assert not (tmp_path / "o" / "intervals.parquet").exists()


@pytest.fixture
def example_files(tmp_path):
    gold = tmp_path / "gold.tsv"
    gold.write_text("doc_id\tcode\nex\t364.11\nex\t364.24\nex\t364.9\n")
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\nex,364.11\nex,364.21\n")
    return gold, pred


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--confidence", "1.5"], "confidence must be between 0 and 1"),
        (["--bootstrap", "-1"], "bootstrap must be at least 0"),
        (["--permutations", "x"], "expected a whole number"),
    ],
)
def test_bad_uncertainty_options_are_refused(example_files, tmp_path, capsys, option, message):
    gold, pred = example_files
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "evaluate",
                "--gold",
                str(gold),
                "--pred",
                f"m={pred}",
                "--out",
                str(tmp_path),
                *option,
            ]
        )
    assert exc.value.code != 0
    assert message in capsys.readouterr().err
