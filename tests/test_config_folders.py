"""Issue 35: results of different configurations never mix. config/config.yaml writes
results/, any other configuration results/<name>/ (hieval.layout); the history is the one
shared store, and keeps an ICD-9 and an ICD-10 evaluation of a model of the same name apart;
a second evaluation of a retrained model opens the report with what changed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest
import yaml
from helpers import REPO, SNAKEMAKE_COMMAND, small_demo_config, snakemake
from test_uncertainty_workflow import UNCERTAINTY
from test_uncertainty_workflow import write_zoo as write_bootstrap_zoo
from test_workflow import write_zoo

from hieval.errors import ConfigError
from hieval.layout import RESERVED_NAMES, config_name, results_folder

# --- The folder of a configuration -------------------------------------------------------------


def test_the_default_config_writes_results_and_any_other_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert results_folder(config_name(None, [])) == "results"
    assert config_name(None, ["config/config.yaml"]) is None  # named again: still the default
    assert config_name(None, [str(tmp_path / "config" / "config.yaml")]) is None
    assert config_name(None, ["config/test/icd10.yaml"]) == "icd10"
    # a second file is an overlay (a site's bounds): the first names the configuration
    assert config_name(None, ["config/paper/cophe_table2.yaml", "bounds.yaml"]) == "cophe_table2"
    assert config_name("mine", ["config/test/icd10.yaml"]) == "mine"
    assert config_name("mine", []) == "mine"  # `--config name=mine`: named, not the default
    assert results_folder("icd10") == "results/icd10"
    assert config_name(None, ["elsewhere/config.yaml"]) == "config"  # another folder's file


@pytest.mark.parametrize("name", ["report", "history", "inputs", "demo"])
def test_a_name_of_a_folder_of_results_is_refused(name):
    with pytest.raises(ConfigError, match=f"'{name}' is a folder the default configuration"):
        config_name(name, [])
    with pytest.raises(ConfigError, match=f"the name of {name}.yaml"):
        config_name(None, [f"{name}.yaml"])


@pytest.mark.parametrize("name", ["../up", ".hidden", "a b", "a/b"])
def test_a_name_that_is_no_folder_name_is_refused(name):
    with pytest.raises(ConfigError, match="is not a folder name"):
        config_name(name, [])


def test_every_folder_the_default_configuration_writes_is_reserved():
    """A configuration named after a folder of results/ would write inside the default one's
    (its report folder's leftovers are removed): every top folder the rules write is one."""
    written = set()
    for rules in (REPO / "workflow" / "rules").glob("*.smk"):
        text = rules.read_text()
        written |= set(re.findall(r'results\(f?"([^/"]+)/', text))
        written |= set(re.findall(r'"results/([^/"{]+)/', text))
    assert written and written <= set(RESERVED_NAMES), written - set(RESERVED_NAMES)


def test_a_reserved_config_file_name_stops_snakemake_before_work(tmp_path):
    small_demo_config(tmp_path)
    (tmp_path / "report.yaml").write_text("max_level: e0\n")
    result = snakemake(tmp_path, "--configfile", "report.yaml", "-n")
    assert result.returncode != 0
    said = result.stdout + result.stderr
    assert "report.yaml 'report' is a folder the default configuration writes" in said
    assert "Traceback" not in said


# --- Two configurations, one history -------------------------------------------------------------


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "history" not in p.relative_to(folder).parts
    }


def test_icd10_config_after_the_demo_leaves_the_demo_untouched(tmp_path, icd10_built):
    small_demo_config(tmp_path, documents=120)
    first = snakemake(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    demo = _files(tmp_path / "results")
    assert "report/metrics.parquet" in demo and "paper/table1.md" in demo
    logs = _files(tmp_path / "logs")

    shutil.copytree(icd10_built, tmp_path / "resources/hierarchy/icd10")
    config = yaml.safe_load((REPO / "config/test/icd10.yaml").read_text())
    config["demo"]["documents"] = 120
    (tmp_path / "icd10.yaml").write_text(yaml.safe_dump(config))
    second = subprocess.run(
        [
            *SNAKEMAKE_COMMAND,
            *("--configfile", "icd10.yaml", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)),
            *("--cores", "2", "--quiet", "progress", "rules", "host"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1200,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    after = _files(tmp_path / "results")
    # the demo's results, byte for byte (and nothing of the ICD-10 run among them)
    assert {name: after[name] for name in demo} == demo
    assert {n.split("/")[0] for n in after} - {n.split("/")[0] for n in demo} == {
        "icd10",
        "demo_icd10",  # the ICD-10 demo's generated inputs, shared as results/demo/ is
    }
    assert {n: b for n, b in _files(tmp_path / "logs").items() if n in logs} == logs
    assert "Code system: icd10" in (tmp_path / "results/icd10/report/summary.md").read_text()
    assert (tmp_path / "logs/icd10/report/report.log").is_file()

    # one history, two series of sibling_confuser: never one line
    history = pl.read_parquet(tmp_path / "results/history/evaluations.parquet")
    mine = history.filter(pl.col("model") == "sibling_confuser")
    assert set(mine["code_system"]) == {"icd9", "icd10"}
    assert mine.group_by("code_system").agg(pl.col("series").n_unique())["series"].to_list() == [
        1,
        1,
    ]
    assert mine["series"].n_unique() == 2 and mine["key"].n_unique() == 2
    page = (tmp_path / "results/icd10/report/report.html").read_text()
    assert "id='history'" not in page and "Changes since the last evaluation" not in page


def test_a_retrained_model_opens_the_report_with_its_changes(tmp_path):
    config = write_zoo(tmp_path)
    first = snakemake(tmp_path, "--configfile", str(config))
    assert first.returncode == 0, first.stderr[-3000:]
    report = tmp_path / "results/my/report"
    assert "Changes since" not in (report / "summary.md").read_text()
    # `exact` retrained: it now also finds 364.9 in document a (flat TP 2 -> 3)
    exact = tmp_path / "exact.csv"
    exact.write_text(exact.read_text() + "a,364.9\n")
    second = snakemake(tmp_path, "--configfile", str(config))
    assert second.returncode == 0, second.stderr[-3000:]
    summary = (report / "summary.md").read_text()
    assert summary.startswith("# Evaluation summary\n\n## Changes since the last evaluation\n")
    # flat micro F1 of exact: 2 TP of 5 predicted, 5 gold (0.4) -> 3 TP of 6, 5 gold (6/11)
    assert re.search(r"\| exact \| F-flat \| [^|]+ \| 40\.0 \| 54\.5 \| \+14\.5 \|", summary)
    section = summary.split("\nHierarchy:")[0]  # the changes, before the summary proper
    assert "scored" not in section  # the same inputs: the same evaluation, nothing to compare
    page = (report / "report.html").read_text()
    assert page.index("id='changes'") < page.index("id='leaderboard'")
    assert "<h3>exact</h3>" in page and (report / "figures/history_exact.svg").is_file()


def test_the_history_keeps_each_headline_value_with_its_interval(tmp_path):
    """With the bootstrap on, each history row holds its value's interval as intervals.parquet
    has it, at the run's confidence (what the changes' verdict compares)."""
    config = write_bootstrap_zoo(tmp_path)
    config.write_text(
        config.read_text().replace(UNCERTAINTY, "")
        + "uncertainty:\n  bootstrap: 20\n  permutations: 9\n  confidence: 0.9\n"
    )
    result = snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = pl.read_parquet(tmp_path / "results/history/evaluations.parquet")
    intervals = pl.read_parquet(tmp_path / "results/my/report/intervals.parquet")
    f_set = rows.filter(pl.col("metric") == "F-set")
    assert f_set.height == 3 and set(f_set["confidence"]) == {0.9}
    for row in f_set.iter_rows(named=True):
        [expected] = intervals.filter(
            (pl.col("model") == row["model"])
            & (pl.col("family") == "set")
            & (pl.col("level") == "overall")
            & (pl.col("average") == "micro")
            & (pl.col("metric") == "f1")
        ).to_dicts()
        assert (row["low"], row["high"]) == (expected["low"], expected["high"])
        assert row["low"] <= row["value"] <= row["high"] and row["low"] < row["high"]
