"""Scores end to end: kept through normalisation, ranked, tuned on a dev set, by the CLI and by
the workflow alike (same rows), and tuning on the test set refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import snakemake
from sklearn.metrics import roc_auc_score

from hieval.cli import main
from hieval.metrics.registry import lookup

CODES = ["401.9", "250.00", "428.0", "427.31", "584.9", "599.0", "272.4", "414.01", "38.93"]
SCORE_FAMILIES = ["ranking", "calibration", "selection"]


def write_split(folder: Path, prefix: str, seed: int, docs: int = 30) -> None:
    """A gold and a scored model's predictions (every code scored, ties included)."""
    rng = np.random.default_rng(seed)
    gold = rng.random((docs, len(CODES))) < 0.3
    scores = np.round(np.clip(rng.random(gold.shape) * 0.7 + 0.3 * gold, 0, 1), 2)
    names = [f"{prefix}{d:02d}" for d in range(docs)]
    rows = [(names[d], CODES[c]) for d, c in zip(*np.nonzero(gold), strict=True)]
    rows += [(names[d], "") for d in range(docs) if not gold[d].any()]  # declared, no codes
    pl.DataFrame(rows, schema=["doc_id", "code"], orient="row").write_csv(
        folder / f"{prefix}_gold.csv"
    )
    pl.DataFrame(
        {
            "doc_id": np.repeat(names, len(CODES)),
            "code": CODES * docs,
            "score": scores.ravel(),
        }
    ).write_parquet(folder / f"{prefix}_scored.parquet")


@pytest.fixture
def zoo(tmp_path) -> Path:
    write_split(tmp_path, "test", 1)
    write_split(tmp_path, "dev", 2)
    pl.DataFrame({"doc_id": ["test00", "test01"], "code": ["401.9", "428.0"]}).write_csv(
        tmp_path / "hard.csv"
    )
    return tmp_path


def run_cli(zoo: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "evaluate",
            "--gold",
            str(zoo / "test_gold.csv"),
            "--pred",
            f"scored={zoo / 'test_scored.parquet'}",
            "--pred",
            f"hard={zoo / 'hard.csv'}",
            "--out",
            str(out),
            "--max-level",
            "e0",
            *extra,
        ]
    )


def test_cli_ranks_tunes_and_records(zoo, tmp_path):
    out = tmp_path / "out"
    code = run_cli(
        zoo,
        out,
        "--dev-gold",
        str(zoo / "dev_gold.csv"),
        "--dev-pred",
        f"scored={zoo / 'dev_scored.parquet'}",
        "--threshold",
        "tune",
        "--k",
        "2",
        "4",
    )
    assert code == 0
    tidy = pl.read_parquet(out / "metrics.parquet")
    every = tidy.filter(pl.col("family").is_in(SCORE_FAMILIES))
    for row in every.iter_rows(named=True):
        lookup(row["family"], row["average"], row["metric"])  # every row is registered
    assert every.filter(pl.col("model") == "hard").height == 0  # no scores, no ranking rows
    leaf = every.filter((pl.col("model") == "scored") & (pl.col("level") == "leaf"))
    assert {"precision@2", "precision@4", "recall@2", "recall@4", "auc", "map"} <= set(
        leaf["metric"]
    )
    assert set(every["level"]) == {"leaf", "e2", "e1", "e0"}

    gold = pl.read_csv(zoo / "test_gold.csv")
    scores = pl.read_parquet(zoo / "test_scored.parquet")
    truth = scores.join(gold.with_columns(pl.lit(1).alias("y")), on=["doc_id", "code"], how="left")
    auc = leaf.filter((pl.col("metric") == "auc") & (pl.col("average") == "micro"))["value"][0]
    assert auc == pytest.approx(
        roc_auc_score(truth["y"].fill_null(0).to_numpy(), truth["score"].to_numpy()), abs=1e-12
    )

    tuned = json.loads((out / "thresholds" / "scored.json").read_text())
    selection = every.filter(pl.col("family") == "selection")
    assert selection.rows() == [
        ("scored", "selection", "leaf", "global", "threshold", tuned["threshold"])
    ]
    # The HTML report draws the dev sweep with the chosen threshold marked.
    html = (out / "report.html").read_text()
    assert "id='thresholds'" in html
    svg = (out / "figures" / "thresholds.svg").read_text()
    assert f"t = {tuned['threshold']:.3g}" in svg
    record = json.loads((out / "work/inputs/predictions/scored.json").read_text())
    assert record["tuned_threshold"]["threshold"] == tuned["threshold"]
    assert len(record["tuned_threshold"]["dev_gold_sha256"]) == 64
    assert len(record["tuned_threshold"]["dev_predictions_sha256"]) == 64
    curve = pl.read_parquet(out / "thresholds" / "scored.parquet")
    assert curve.filter("chosen")["threshold"].to_list() == [tuned["threshold"]]
    # the tuned threshold decides: decisions are exactly the test scores at or above it
    decisions = pl.read_parquet(out / "work/inputs/predictions/scored.parquet").drop_nulls("code")
    assert decisions.height == scores.filter(pl.col("score") >= tuned["threshold"]).height
    assert decisions.columns == ["doc_id", "code", "score"]
    assert "hard predictions (no scores)" in (out / "summary.md").read_text()


@pytest.mark.parametrize(
    ("dev_gold", "message"),
    [("test_gold.csv", "same content"), ("same_docs.csv", "same 30 documents")],
)
def test_tuning_on_the_test_set_is_refused(zoo, tmp_path, capsys, dev_gold, message):
    gold = pl.read_csv(zoo / "test_gold.csv")
    gold.with_columns(pl.lit("401.9").alias("code")).unique().write_csv(zoo / "same_docs.csv")
    out = tmp_path / "out"
    code = run_cli(
        zoo,
        out,
        "--dev-gold",
        str(zoo / dev_gold),
        "--dev-pred",
        f"scored={zoo / 'test_scored.parquet'}",
        "--threshold",
        "tune",
    )
    err = capsys.readouterr().err
    assert code == 1 and message in err and "test set" in err
    assert not out.exists()


def test_tune_without_dev_predictions_is_an_error(zoo, tmp_path, capsys):
    out = tmp_path / "out"
    code = run_cli(zoo, out, "--dev-gold", str(zoo / "dev_gold.csv"), "--threshold", "tune")
    err = capsys.readouterr().err
    assert code == 1 and "no dev predictions" in err and "--dev-pred scored=" in err
    assert not out.exists()


def test_workflow_gives_the_cli_rows_and_adds_models_alone(zoo, tmp_path):
    (zoo / "models.tsv").write_text(
        "model\tpredictions\tthreshold\tdev_predictions\n"
        "scored\ttest_scored.parquet\ttune\tdev_scored.parquet\n"
        "hard\thard.csv\t\t\n"
    )
    config = zoo / "my.yaml"
    config.write_text(
        "gold: test_gold.csv\nmodels: models.tsv\nmax_level: e0\ndev_gold: dev_gold.csv\n"
        "ranking:\n  k: [2, 4]\ntuning:\n  per_code: true\n  min_support: 3\n"
    )
    result = snakemake(zoo, "--configfile", str(config))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "cli"
    assert (
        run_cli(
            zoo,
            out,
            "--dev-gold",
            str(zoo / "dev_gold.csv"),
            "--dev-pred",
            f"scored={zoo / 'dev_scored.parquet'}",
            "--threshold",
            "tune",
            "--k",
            "2",
            "4",
            "--tuning-per-code",
            "--tuning-min-support",
            "3",
        )
        == 0
    )
    workflow = pl.read_parquet(zoo / "results/my/report/metrics.parquet")
    cli = pl.read_parquet(out / "metrics.parquet")
    assert workflow.equals(cli)
    assert workflow.filter(pl.col("family") == "ranking").height > 0
    codes = pl.read_parquet(zoo / "results/my/thresholds/scored.codes.parquet")
    assert codes.height > 0 and (codes["support"] >= 3).all()

    # a scored model added to the sheet: only its own jobs (and the report) are planned
    with (zoo / "models.tsv").open("a") as sheet:
        sheet.write("again\ttest_scored.parquet\t0.4\t\n")
    dry = snakemake(zoo, "--configfile", str(config), "-n", quiet=False)
    planned = dry.stdout + dry.stderr
    assert dry.returncode == 0, planned
    outputs = " ".join(line for line in planned.splitlines() if "output:" in line)
    assert "results/my/ranking/again.parquet" in outputs
    for other in ("scored", "hard"):
        assert f"/{other}." not in outputs
    assert "tune_threshold" not in planned
