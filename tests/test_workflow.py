"""Integration tests: the Snakemake workflow run for real, in temporary directories."""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import polars as pl
import pytest
from helpers import (
    BUILT_CACHE,
    REPO,
    SNAKEMAKE,
    copy_run,
    parse_time_refusal,
    prebuilt_tables,
    slurm_plugin_env,
    small_demo_config,
    snakemake,
)

# Rules that run on the submitting host, never as cluster jobs.
LOCAL_RULES = {"all", "report", "paper_table1", "fetch_hierarchy"}
REFERENCE = REPO.parent / "shared" / "reference" / "cophe_icd9_graph_desc.json"


def write_zoo(workdir: Path) -> Path:
    """A small user zoo: gold, two models (one scored), a sheet and a config."""
    gold = pl.DataFrame(
        {
            "doc_id": ["a", "a", "a", "b", "b", "c"],
            "code": ["364.11", "364.24", "364.9", "401.9", "96.04", ""],
        }
    )
    gold.write_csv(workdir / "gold.csv")
    pl.DataFrame(
        {
            "doc_id": ["a", "a", "a", "a", "b"],
            "code": ["364.11", "364.21", "364.3", "364.41", "401.9"],
        }
    ).write_csv(workdir / "exact.csv")
    pl.DataFrame(
        {
            "doc_id": ["a", "a", "b", "b", "c"],
            "code": ["364.11", "364.9", "401.9", "96.04", "250.00"],
            "score": [0.9, 0.2, 0.8, 0.7, 0.6],
        }
    ).write_parquet(workdir / "scored.parquet")
    (workdir / "models.tsv").write_text(
        "model\tpredictions\tthreshold\tdescription\n"
        "exact\texact.csv\t\tthe paper's example plus one document\n"
        "scored\tscored.parquet\t0.5\tscored predictions\n"
    )
    config = workdir / "my.yaml"
    config.write_text("gold: gold.csv\nmodels: models.tsv\nmax_level: e0\n")
    return config


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    """The default target (the embedded demo, 300 documents) run once by Snakemake: read it,
    or copy it (helpers.copy_run) to change something and rerun."""
    work = tmp_path_factory.mktemp("demo_run")
    small_demo_config(work)
    result = snakemake(work)
    assert result.returncode == 0, result.stderr[-3000:]
    return work


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory) -> Path:
    """write_zoo's zoo evaluated once by Snakemake; tests read it or copy it (copy_run)."""
    work = tmp_path_factory.mktemp("zoo_run")
    config = write_zoo(work)
    result = snakemake(work, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    return work


def test_user_zoo_in_workdir(zoo_run):
    """`snakemake -s PATH/Snakefile -d WORKDIR --configfile my.yaml` evaluates a user's zoo."""
    tmp_path = zoo_run
    tidy = pl.read_parquet(tmp_path / "results/my/report/metrics.parquet")
    assert tidy.columns == ["model", "family", "level", "average", "metric", "value"]
    assert set(tidy["model"]) == {"exact", "scored"}
    assert set(tidy["level"]) == {"leaf", "e2", "e1", "e0", "overall"}

    def value(model, family, level, metric):
        return tidy.filter(
            (pl.col("model") == model)
            & (pl.col("family") == family)
            & (pl.col("level") == level)
            & (pl.col("average") == "micro")
            & (pl.col("metric") == metric)
        )["value"].item()

    # Document a is the paper's example (CoPHE overall 6/5/2); document b adds 401.9 (TP at
    # e1 and e0) and misses 96.04 (FN at e2, e1 and e0). Hand-counted.
    assert [value("exact", "cophe", "overall", m) for m in ("tp", "fp", "fn")] == [8, 5, 5]
    assert [value("exact", "flat", "leaf", m) for m in ("tp", "fp", "fn")] == [2, 3, 3]
    # The scored model keeps score >= 0.5: a: 364.11; b: 401.9, 96.04; c (no gold): 250.00.
    assert [value("scored", "flat", "leaf", m) for m in ("tp", "fp", "fn")] == [3, 1, 2]
    assert not (tmp_path / "results/demo").exists(), "the demo must not run for a user's zoo"
    assert (tmp_path / "results/my/report/nodes/exact.csv").exists()
    assert (tmp_path / "logs/my/models/exact.log").read_text().strip()
    summary = (tmp_path / "results/my/report/summary.md").read_text()
    assert "| exact |" in summary and "| scored |" in summary


def test_demo_runs_and_regenerates_bit_for_bit(demo_run, tmp_path):
    """The default target runs the embedded demo; a second clean run writes identical bytes."""
    small_demo_config(tmp_path)
    result = snakemake(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [demo_run, tmp_path]
    for output in (
        "results/report/metrics.parquet",
        "results/report/summary.csv",
        "results/report/summary.md",
        "results/paper/table1.md",
        "results/report/nodes/over_predictor.csv",
    ):
        first, second = ((run / output).read_bytes() for run in runs)
        assert first == second, f"{output} differs between two clean runs"
    table1 = (runs[0] / "results/paper/table1.md").read_text()
    assert "| CoPHE | overall | 6 | 5 | 2 |" in table1
    assert "28.4" in table1 and "63.1" in table1
    tidy = pl.read_parquet(runs[0] / "results/report/metrics.parquet")
    assert tidy["model"].unique().len() == 4


def test_rerun_does_only_new_work(zoo_run, tmp_path):
    """Adding a model to the sheet reruns only that model's jobs and the report."""
    copy_run(zoo_run, tmp_path)
    config = tmp_path / "my.yaml"
    shutil.copy(tmp_path / "exact.csv", tmp_path / "copy.csv")
    with (tmp_path / "models.tsv").open("a") as sheet:
        sheet.write("copy\tcopy.csv\t\ta copy\n")
    dry = snakemake(tmp_path, "--configfile", str(config), "-n", quiet=False)
    assert dry.returncode == 0, dry.stderr
    planned = dry.stdout + dry.stderr
    assert re.search(r"^evaluate_model\s+1$", planned, re.M), planned  # the new model only
    assert "report" in planned
    assert "build_levels" not in planned and "normalize_gold" not in planned


def test_changed_threshold_reruns_only_that_model(zoo_run, tmp_path):
    copy_run(zoo_run, tmp_path)
    config = tmp_path / "my.yaml"
    sheet = tmp_path / "models.tsv"
    sheet.write_text(sheet.read_text().replace("scored.parquet\t0.5", "scored.parquet\t0.8"))
    dry = snakemake(tmp_path, "--configfile", str(config), "-n", quiet=False)
    planned = dry.stdout + dry.stderr
    assert "Params have changed" in planned and '"threshold": 0.8' in planned
    assert "results/my/inputs/predictions/scored.parquet" in planned
    # no job of the other model; the jobs over every model (conventions, report) read its file
    assert "model=exact" not in planned


def test_engine_bounds_rerun_nothing(zoo_run, tmp_path):
    """Memory bounds never change a number, so changing them must not rerun any job."""
    copy_run(zoo_run, tmp_path)
    config = tmp_path / "my.yaml"
    bounds = tmp_path / "bounds.yaml"
    bounds.write_text("engine:\n  memory_limit: 1GB\n  temp_directory: spill\n")
    dry = snakemake(tmp_path, "--configfile", str(config), str(bounds), "-n", quiet=False)
    assert dry.returncode == 0, dry.stderr
    assert "Nothing to be done" in dry.stdout + dry.stderr


@pytest.mark.parametrize(
    ("sheet", "message"),
    [
        ("model\tpredictions\nm1\texact.csv\nm1\texact.csv\n", "model 'm1' is already defined"),
        ("model\tpredictions\tthreshold\nm1\texact.csv\t1.5\n", "column 'threshold'"),
        ("model\tpredictions\tthreshold\nm1\texact.csv\thigh\n", "must be a number"),
        ("model\tpredictions\nm1\t.\n", "is a directory"),
        ("model\tpath\nm1\texact.csv\n", "missing column(s) ['predictions']"),
        ("model\tpredictions\ttreshold\nm1\texact.csv\t0.5\n", "unknown column(s) 'treshold'"),
    ],
)
def test_bad_model_sheet_fails_before_work(tmp_path, sheet, message):
    config = write_zoo(tmp_path)
    (tmp_path / "models.tsv").write_text(sheet)
    refusal = parse_time_refusal(tmp_path, config)
    assert message in refusal and "line" in refusal


def test_bad_model_sheet_stops_snakemake_before_work(tmp_path):
    """What parse_time_refusal checks is what Snakemake prints: alone, non-zero, no output."""
    config = write_zoo(tmp_path)
    (tmp_path / "models.tsv").write_text("model\tpredictions\tthreshold\nm1\texact.csv\t1.5\n")
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode != 0
    assert parse_time_refusal(tmp_path, config) in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "results").exists()


def test_bad_config_key_is_named(tmp_path):
    config = write_zoo(tmp_path)
    config.write_text("gold: gold.csv\nmodels: models.tsv\nunknown_codes: ignore\n")
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode != 0
    assert "unknown_codes" in result.stderr and "ignore" in result.stderr


def test_bad_gold_fails_cleanly_without_outputs(tmp_path):
    """A malformed code stops the run with the file, line and value, and no report appears."""
    config = write_zoo(tmp_path)
    (tmp_path / "gold.csv").write_text("doc_id,code\na,364.11\nb,4O1.9\n")
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode != 0
    log = (tmp_path / "logs/my/inputs/gold.log").read_text()
    assert "gold.csv, line 3" in log and "'4O1.9'" in log
    assert not (tmp_path / "results/my/inputs/gold.parquet").exists()
    assert not (tmp_path / "results/my/report").exists()


def test_hierarchy_target_offline(tmp_path):
    """`snakemake hierarchy` builds the level tables from the installed package, offline, and
    caches them for the next run (the other workflow tests start from such a cache)."""
    shutil.copytree(REPO / "config", tmp_path / "config")
    result = snakemake(tmp_path, "hierarchy", prebuilt=False)
    assert result.returncode == 0, result.stderr[-3000:]
    built = list((tmp_path / BUILT_CACHE).glob("package-*/manifest.json"))
    assert [p.parent.name for p in built] == [p.name for p in prebuilt_tables().iterdir()]
    log = (tmp_path / "logs/hierarchy/build_levels.log").read_text()
    assert "built and cached" in log
    levels = pl.read_parquet(tmp_path / "results/hierarchy/levels.parquet")
    assert levels.columns == ["code", "kind", "depth", "e1", "e0", "c", "chapter", "title"]
    ancestors = pl.read_parquet(tmp_path / "results/hierarchy/ancestors.parquet")
    assert ancestors.columns == ["code", "level", "ancestor"]
    assert not (tmp_path / "results/demo").exists()


@pytest.mark.skipif(not REFERENCE.exists(), reason="../shared/reference is absent")
def test_cophe_source_from_cache(tmp_path):
    """The cophe source uses a cached download after checking its pinned sha256."""
    cached = tmp_path / "resources/hierarchy/cophe/icd9_graph_desc.json"
    cached.parent.mkdir(parents=True)
    shutil.copy(REFERENCE, cached)
    shutil.copytree(REPO / "config", tmp_path / "config")
    result = snakemake(tmp_path, "hierarchy", "--config", "hierarchy={'source': 'cophe'}")
    assert result.returncode == 0, result.stderr[-3000:]
    levels = pl.read_parquet(tmp_path / "results/hierarchy/levels.parquet")
    row = levels.filter(pl.col("code") == "364.11").row(0, named=True)
    assert (row["e1"], row["e0"], row["c"], row["chapter"]) == (
        "364.1",
        "364",
        "360-379",
        "320-389",
    )


def test_cophe_cache_with_wrong_checksum_is_refused(tmp_path):
    cached = tmp_path / "resources/hierarchy/cophe/icd9_graph_desc.json"
    cached.parent.mkdir(parents=True)
    cached.write_text("{}")
    shutil.copytree(REPO / "config", tmp_path / "config")
    result = snakemake(tmp_path, "hierarchy", "--config", "hierarchy={'source': 'cophe'}")
    assert result.returncode != 0
    log = (tmp_path / "logs/hierarchy/build_levels.log").read_text()
    assert "expected f963e176" in log and "delete it to download it again" in log


def test_adapters_through_the_model_sheet(tmp_path):
    """CAML gold and predictions (detected) and a dense matrix with named lists (sheet columns)."""
    import numpy as np

    (tmp_path / "test_full.csv").write_text(
        'SUBJECT_ID,HADM_ID,TEXT,LABELS\n1,100,"a note, with commas",401.9;96.04\n'
        "2,200,another note,364.11\n"
    )
    (tmp_path / "preds_test.psv").write_text("100|401.9|96.04\n200|364.1\n")
    np.save(tmp_path / "m.npy", np.array([[1, 0], [0, 1]], np.int8))
    (tmp_path / "cols.txt").write_text("401.9\n364.11\n")
    (tmp_path / "rows.txt").write_text("100\n200\n")
    (tmp_path / "models.tsv").write_text(
        "model\tpredictions\tformat\tcode_list\tdoc_list\n"
        "caml\tpreds_test.psv\t\t\t\n"
        "dense\tm.npy\tdense\tcols.txt\trows.txt\n"
    )
    config = tmp_path / "my.yaml"
    config.write_text("gold: test_full.csv\nmodels: models.tsv\n")
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    tidy = pl.read_parquet(tmp_path / "results/my/report/metrics.parquet")
    flat = tidy.filter((pl.col("family") == "flat") & (pl.col("average") == "micro"))
    counts = {(m, k): v for m, k, v in flat.select("model", "metric", "value").iter_rows()}
    # caml: 401.9 and 96.04 right, 364.1 for 364.11 wrong; dense: 401.9 and 364.11 right.
    assert [counts["caml", k] for k in ("tp", "fp", "fn")] == [2, 1, 1]
    assert [counts["dense", k] for k in ("tp", "fp", "fn")] == [2, 0, 1]
    record = (tmp_path / "results/my/inputs/predictions/caml.json").read_text()
    assert '"format": "caml_psv"' in record


def test_sharded_equals_unsharded(zoo_run, tmp_path):
    """Every number of the report, ICM included, is identical with 1 (the default: one job per
    model) and 3 document shards (through Snakemake's scatter/gather; tests/test_sharding.py
    covers more cases fast). ICM keeps documents with an empty gold (the default)."""
    work = tmp_path / "shards3"
    work.mkdir()
    config = write_zoo(work)
    config.write_text(config.read_text() + "shards: 3\nicm:\n  empty_gold: keep\n")
    result = snakemake(work, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = {1: zoo_run, 3: work}
    assert len(list((tmp_path / "shards3/results/my/counts/exact/shards").iterdir())) == 3
    for name in ("metrics.parquet", "summary.csv", "summary.md"):
        first, second = ((outputs[s] / "results/my/report" / name).read_bytes() for s in (1, 3))
        assert first == second, f"{name} differs between 1 and 3 shards"
    tidy = pl.read_parquet(outputs[3] / "results/my/report/metrics.parquet")
    assert {"icm", "example", "propensity", "hierarchical"} <= set(tidy["family"])


def test_slurm_profile_dry_run(tmp_path):
    """The SLURM profile, with a site profile layered on it, plans every job with the plugin
    installed (no cluster needed): the site's partition and account reach every job, and no
    job loses the memory and wall time its rule declares."""
    env = slurm_plugin_env()
    shutil.copytree(REPO / "config", tmp_path / "config")
    result = subprocess.run(
        [
            str(SNAKEMAKE),
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path),
            "--profile",
            str(REPO / "profiles/slurm"),
            "--profile",
            str(REPO / "profiles/site-example"),
            "--config",
            "shards=2",
            "-n",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    plan = result.stdout + result.stderr
    assert "This was a dry-run" in plan
    assert "scatteritem=2-of-2" in plan
    # Each planned job: "rule NAME:" then indented lines up to its resources (grouped jobs are
    # indented once more).
    jobs = re.findall(r"^ *(?:local)?rule (\w+):\n(?: +.*\n)*? +resources: (.*)$", plan, re.M)
    submitted = [(rule, res) for rule, res in jobs if rule not in LOCAL_RULES]
    assert {rule for rule, _ in submitted} >= {"build_levels", "count", "metrics"}
    for rule, resources in submitted:
        assert re.search(r"\bmem_mb=\d+", resources), f"{rule}: {resources}"
        assert re.search(r"\bruntime=\d+", resources), f"{rule}: {resources}"
        assert "slurm_partition=YOUR_PARTITION" in resources, f"{rule}: {resources}"


def test_snakemake_report_and_history(demo_run, tmp_path):
    """Through Snakemake: the report zip holds the results; the history grows only when an
    evaluation's key is new (a changed threshold: rows for that model only)."""
    copy_run(demo_run, tmp_path)  # a finished run of the small demo: its history is written
    history = tmp_path / "results/history/evaluations.parquet"
    rows = pl.read_parquet(history)
    models = rows["model"].unique().to_list()
    assert len(models) == 4 and rows["key"].n_unique() == 4
    assert set(rows["metric"]) == {"F-flat", "F-set", "F-CoPHE", "ICM", "EB-F"}

    again = snakemake(tmp_path, "--forcerun", "report")
    assert again.returncode == 0, again.stderr[-3000:]
    assert pl.read_parquet(history).equals(rows)

    sheet = tmp_path / "config" / "models.tsv"
    lines = sheet.read_text().splitlines()
    header = lines[0].split("\t")
    changed = None
    for i, line in enumerate(lines[1:], start=1):
        cells = line.split("\t") + [""] * (len(header) - len(line.split("\t")))
        if cells[header.index("model")] == "over_predictor":
            cells[header.index("threshold")] = "0.7"
            lines[i], changed = "\t".join(cells), cells[header.index("model")]
    sheet.write_text("\n".join(lines) + "\n")
    third = snakemake(tmp_path)
    assert third.returncode == 0, third.stderr[-3000:]
    grown = pl.read_parquet(history)
    added = grown.join(rows, on=["key", "metric"], how="anti")
    assert set(added["model"]) == {changed} and added.height == 5

    report = snakemake(tmp_path, "--report", "report.zip")
    assert report.returncode == 0, report.stderr[-3000:]
    with zipfile.ZipFile(tmp_path / "report.zip") as archive:
        names = "\n".join(archive.namelist())
    for part in ("report.html", "tables.tex", "tables.md", "per_level.svg"):
        assert part in names, part
