"""Intervals and comparisons of a zoo with score files, through Snakemake and through the CLI:
every tidy row (count, ranking, calibration, ROC-AUC) gets an interval, every pair of scored
models a test on its ranking rows too, and the workflow and ``hieval evaluate`` write the same
tables for the same inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import snakemake

from hieval.cli import main

CODES = ["401.9", "250.00", "428.0", "427.31", "584.9", "599.0", "272.4", "414.01", "38.93"]
DOCS = 36
MODELS = ("sharp", "blunt", "hard")
OPTIONS = {"bootstrap": 40, "permutations": 19, "seed": 7}


def write_zoo(folder: Path) -> None:
    """A gold, two scored models (``blunt``'s file truncated to each document's top 5 codes,
    so it has unscored pairs) and a model with hard predictions."""
    rng = np.random.default_rng(4)
    gold = rng.random((DOCS, len(CODES))) < 0.3
    names = [f"doc{d:02d}" for d in range(DOCS)]
    rows = [(names[d], CODES[c]) for d, c in zip(*np.nonzero(gold), strict=True)]
    rows += [(names[d], "") for d in range(DOCS) if not gold[d].any()]  # declared, no codes
    pl.DataFrame(rows, schema=["doc_id", "code"], orient="row").write_csv(folder / "gold.csv")
    for name, signal, top in (("sharp", 0.5, len(CODES)), ("blunt", 0.2, 5)):
        scores = np.round(np.clip(rng.random(gold.shape) * 0.6 + signal * gold, 0, 1), 2)
        frame = pl.DataFrame(
            {"doc_id": np.repeat(names, len(CODES)), "code": CODES * DOCS, "score": scores.ravel()}
        )
        frame = frame.filter(pl.col("score").rank("ordinal", descending=True).over("doc_id") <= top)
        frame.write_parquet(folder / f"{name}.parquet")
    hard = [(d, c) for d, c in rows if c and rng.random() < 0.7]
    pl.DataFrame(hard, schema=["doc_id", "code"], orient="row").write_csv(folder / "hard.csv")
    (folder / "models.tsv").write_text(
        "model\tpredictions\nsharp\tsharp.parquet\nblunt\tblunt.parquet\nhard\thard.csv\n"
    )
    uncertainty = "".join(f"  {k}: {v}\n" for k, v in OPTIONS.items())
    (folder / "my.yaml").write_text(
        "gold: gold.csv\nmodels: models.tsv\nmax_level: e0\nranking:\n  k: [2, 4]\n"
        f"uncertainty:\n{uncertainty}"
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The zoo through the workflow (one Snakemake run) and through the CLI."""
    base = tmp_path_factory.mktemp("scored_uncertainty")
    work = base / "workflow"
    work.mkdir()
    write_zoo(work)
    result = snakemake(work, "--configfile", str(work / "my.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    args = ["evaluate", "--gold", str(work / "gold.csv"), "--out", str(base / "cli")]
    suffix = {"sharp": "parquet", "blunt": "parquet", "hard": "csv"}
    for name in MODELS:
        args += ["--pred", f"{name}={work / name}.{suffix[name]}"]
    args += ["--max-level", "e0", "--k", "2", "4"]
    for option, value in OPTIONS.items():
        args += [f"--{option}", str(value)]
    assert main(args) == 0
    return {"workflow": work / "results" / "my" / "report", "cli": base / "cli"}


def test_every_tidy_row_has_an_interval_auc_included(runs):
    report = runs["workflow"]
    tidy = pl.read_parquet(report / "metrics.parquet")
    intervals = pl.read_parquet(report / "intervals.parquet")
    assert intervals.select(tidy.columns).equals(tidy)  # every row, its value unchanged
    assert (intervals["replicates"] == OPTIONS["bootstrap"]).all()
    assert (intervals["low"] <= intervals["high"]).all()
    scored = intervals.filter(pl.col("model") != "hard")
    for model in ("sharp", "blunt"):
        own = scored.filter(pl.col("model") == model)
        assert set(own["family"]) >= {"flat", "set", "cophe", "ranking", "calibration"}
        auc = own.filter(pl.col("metric") == "auc")
        levels = set(own.filter(pl.col("family") == "ranking")["level"])
        assert len(levels) >= 2  # the leaves and at least one level of the hierarchy
        assert set(auc.select("level", "average").iter_rows()) == {
            (level, average) for level in levels for average in ("micro", "macro")
        }
        # macro AUC is a label-set average: centred on the estimate; micro AUC percentile
        method = dict(zip(auc["average"], auc["method"], strict=False))
        assert method == {"micro": "percentile", "macro": "centred"}
    hard = intervals.filter(pl.col("model") == "hard")
    assert not set(hard["family"]) & {"ranking", "calibration"}


def test_scored_pairs_are_compared_on_ranking_calibration_and_auc(runs):
    comparisons = pl.read_parquet(runs["workflow"] / "comparisons.parquet")
    assert (comparisons["permutations"] == OPTIONS["permutations"]).all()
    assert comparisons["p_value"].is_not_null().all()
    pair = comparisons.filter((pl.col("model_a") == "sharp") & (pl.col("model_b") == "blunt"))
    assert set(pair["family"]) >= {"ranking", "calibration"}
    auc = pair.filter(pl.col("metric") == "auc")
    assert auc.height >= 4
    # sharp's scores separate the gold far better, and blunt's truncated file ties its
    # unscored pairs at the bottom: every AUC difference is positive and clearly not noise
    assert (auc["difference"] > 0).all() and (auc["p_value"] <= 0.1).all()
    with_hard = comparisons.filter(pl.col("model_b") == "hard")
    assert with_hard.height > 0
    assert not set(with_hard["family"]) & {"ranking", "calibration"}


def test_the_cli_writes_the_workflows_tables(runs):
    for name in ("metrics.parquet", "intervals.parquet", "comparisons.parquet"):
        workflow = pl.read_parquet(runs["workflow"] / name)
        cli = pl.read_parquet(runs["cli"] / name)
        assert cli.equals(workflow), name
