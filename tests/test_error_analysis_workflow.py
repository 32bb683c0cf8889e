"""Error analysis through the workflow and the CLI (issue 34): the workflow writes
results/report/errors.parquet, confusions/ and codes/, with the numbers of a hand-worked zoo,
and the CLI writes the same tables, byte for byte, from the same inputs."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from helpers import small_demo_config, snakemake

from hieval import cli

MODELS = ("exact", "empty")


def write_zoo(workdir: Path) -> Path:
    """Document a: two misses near three wrong codes; b: a plain miss; c: no gold code. The
    model `empty` predicts nothing at all."""
    pl.DataFrame(
        {
            "doc_id": ["a", "a", "a", "b", "b", "c"],
            "code": ["364.11", "364.24", "364.9", "401.9", "96.04", ""],
        }
    ).write_csv(workdir / "gold.csv")
    pl.DataFrame(
        {
            "doc_id": ["a", "a", "a", "a", "b"],
            "code": ["364.11", "364.21", "364.3", "364.41", "401.9"],
        }
    ).write_csv(workdir / "exact.csv")
    pl.DataFrame({"doc_id": ["a"], "code": [""]}).write_csv(workdir / "empty.csv")
    (workdir / "models.tsv").write_text("model\tpredictions\nexact\texact.csv\nempty\tempty.csv\n")
    config = workdir / "my.yaml"
    pl.DataFrame({"doc_id": ["a", "b"], "sex": ["F", "M"]}).write_csv(workdir / "groups.csv")
    config.write_text(
        "gold: gold.csv\nmodels: models.tsv\ntrain_gold: gold.csv\ndoc_groups: groups.csv\n"
    )
    return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """The zoo through Snakemake (its results/report) and through the CLI (its --out)."""
    work = tmp_path_factory.mktemp("analysis_zoo")
    config = write_zoo(work)
    small_demo_config(work)  # the shipped config folder, which the workflow validates against
    result = snakemake(work, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    out = work / "cli-out"
    argv = ["evaluate", "--gold", str(work / "gold.csv"), "--out", str(out)]
    argv += ["--cache", str(work / "resources"), "--train-gold", str(work / "gold.csv")]
    argv += ["--doc-groups", str(work / "groups.csv")]
    for model in MODELS:
        argv += ["--pred", f"{model}={work / model}.csv"]
    assert cli.main(argv) == 0
    return work / "results" / "my" / "report", out


def test_workflow_writes_the_hand_worked_error_distance(runs):
    report, _ = runs
    table = pl.read_parquet(report / "errors.parquet")
    rows = {(m, k, lv): c for m, k, lv, _, c, _ in table.iter_rows()}
    # exact: 364.24 meets 364.21 at e1 (364.2), 364.9 meets 364.3 at e0 (364); 96.04 is a
    # plain miss (b has no wrong code); wrong 364.21 at e1, 364.3 and 364.41 at e0.
    assert rows == {
        ("exact", "fn", "e1"): 1,
        ("exact", "fn", "e0"): 1,
        ("exact", "fn", "none"): 1,
        ("exact", "fp", "e1"): 1,
        ("exact", "fp", "e0"): 2,
        ("empty", "fn", "none"): 5,
    }
    assert set(table["code_status"]) == {"valid"}
    assert table.filter(model="exact", kind="fp")["share"].to_list() == [1 / 3, 2 / 3]
    confusions = pl.read_parquet(report / "confusions" / "exact.parquet")
    # every (miss, wrong code) pair of a, all within 364; one document each, so by the codes
    assert confusions.rows() == [
        ("364.24", "364.21", "e1", 1),
        ("364.24", "364.3", "e0", 1),
        ("364.24", "364.41", "e0", 1),
        ("364.9", "364.21", "e0", 1),
        ("364.9", "364.3", "e0", 1),
        ("364.9", "364.41", "e0", 1),
    ]
    assert pl.read_parquet(report / "confusions" / "empty.parquet").height == 0
    codes = pl.read_parquet(report / "codes" / "exact.parquet")
    row = codes.filter(code="364").row(0, named=True)  # category 364: a (both sides) only
    assert (row["level"], row["support"], row["tp"], row["fp"], row["fn"]) == ("e0", 1, 1, 0, 0)
    assert codes.filter(code="96.04")["train_frequency"].to_list() == [1]
    groups = pl.read_parquet(report / "groups.parquet")
    flat = groups.filter(model="exact", family="flat", metric="recall")
    # a (F): 364.11 of three; b (M): 401.9 of two; c, unlisted: no gold code, recall 0 by rule
    assert dict(zip(flat["group"], flat["value"], strict=True)) == {
        "F": 1 / 3,
        "M": 1 / 2,
        "(missing)": 0.0,
    }


def test_cli_writes_the_workflows_tables(runs):
    report, out = runs
    names = ["errors.parquet", "groups.parquet", "group_gaps.parquet"]
    names += [f"{folder}/{m}.parquet" for folder in ("confusions", "codes") for m in MODELS]
    for name in names:
        assert pl.read_parquet(out / name).equals(pl.read_parquet(report / name)), name


def test_report_shows_the_error_sections(runs):
    """Both reports hold the three sections; the CLI's renders in Chromium without a script
    error, with the near misses' titles and the groups' rows in its DOM."""
    from test_reports import CHROMIUM, _chromium, _console_errors

    _report, out = runs
    for folder in runs:
        text = (folder / "report.html").read_text("utf-8")
        for heading in ("How the errors fall", "Per code", "Who it fails"):
            assert f">{heading}</h2>" in text, (folder, heading)
        assert (folder / "figures" / "error_distance.svg").exists()
    if CHROMIUM is None:
        pytest.skip("chromium is not installed")
    page = out / "report.html"
    assert _console_errors(page) == []
    dom = _chromium("--dump-dom", page.as_uri()).stdout
    assert "iridocyclitis" in dom.lower()  # the titles of the 364.x near misses
    assert ">(missing)<" in dom and "codes-0" in dom
