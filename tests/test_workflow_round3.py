"""Issue 30, round three, through Snakemake: no output of an earlier configuration survives
beside new results; a damaged history is refused before the report job can lose the previous
report; numbers typed with ``--config`` are numbers."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from helpers import copy_run, parse_time_refusal, snakemake
from test_uncertainty_workflow import UNCERTAINTY, write_zoo

REPORT = Path("results/my/report")


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


def test_numbers_typed_with_config_are_numbers(zoo_run, tmp_path):
    """Snakemake keeps a nested --config value a string; hieval reads it as the number typed."""
    work = copy_run(zoo_run, tmp_path)
    result = snakemake(
        work,
        "--configfile",
        "my.yaml",
        "--config",
        'uncertainty={"bootstrap": 30, "confidence": 0.9, "permutations": 9}',
        'ranking={"k": [2, 4]}',
        "-n",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "uncertainty" in result.stdout  # the new bootstrap reruns the intervals


def test_a_quoted_number_in_a_config_file_is_still_refused(zoo_run, tmp_path):
    work = copy_run(zoo_run, tmp_path)
    config = work / "my.yaml"
    config.write_text(config.read_text().replace("bootstrap: 20", 'bootstrap: "20"'))
    assert "'uncertainty.bootstrap': '20' is not of type 'integer'" in parse_time_refusal(
        work, config
    )


SCHEMAS = Path(__file__).resolve().parents[1] / "workflow" / "schemas"


def _typed_config(tmp_path: Path, file_text: str, *entries: str) -> dict:
    """The config as common.smk sees it: the file, merged with ``--config`` entries as
    Snakemake parses them, then loaded (typed and validated) by hieval."""
    import contextlib

    import yaml
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    from hieval.config import load_workflow_config

    (tmp_path / "models.tsv").write_text("model\tpredictions\nm\tm.csv\n")
    config = yaml.safe_load("gold: gold.csv\nmodels: models.tsv\n" + file_text) or {}
    command_line = parse_config(list(entries))
    update_config(config, command_line)
    with contextlib.chdir(tmp_path):
        load_workflow_config(config, SCHEMAS, command_line=command_line)
    return config


def test_nested_config_values_get_the_schemas_types(tmp_path):
    config = _typed_config(
        tmp_path,
        "uncertainty:\n  seed: 7\n",
        'uncertainty={"bootstrap": 200, "confidence": 0.9}',
        'ranking={"k": [5, 10]}',
        'tuning={"per_code": true, "min_support": 3}',
        'icm={"alpha1": 1.5, "beta": 2}',
        'engine={"memory_limit": null}',
    )
    assert config["uncertainty"] == {
        "bootstrap": 200,
        "confidence": 0.9,
        "seed": 7,  # from the file, untouched
        "permutations": 999,
    }
    assert config["ranking"]["k"] == [5, 10]
    assert config["tuning"] == {
        "per_code": True,
        "min_support": 3,
        "allow_dev_test_overlap": False,
        "method": "exact",
    }
    assert config["icm"]["alpha1"] == 1.5 and config["icm"]["beta"] == 2
    assert config["engine"]["memory_limit"] is None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('uncertainty={"bootstrap": "many"}', "'uncertainty.bootstrap': 'many' is not of type"),
        ('uncertainty={"bootstrap": 2.5}', "'uncertainty.bootstrap': '2.5' is not of type"),
        ('uncertainty={"bootstrap": -1}', "'uncertainty.bootstrap': -1 is less than"),
        ('tuning={"per_code": "maybe"}', "'tuning.per_code': 'maybe' is not of type"),
    ],
)
def test_config_values_that_are_no_such_number_are_still_refused(tmp_path, entry, message):
    from hieval.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        _typed_config(tmp_path, "", entry)


def test_only_command_line_values_are_typed(tmp_path):
    """A quoted number in the config file is the user's string: refused, as before."""
    from hieval.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape("'uncertainty.bootstrap': '20' is not")):
        _typed_config(tmp_path, 'uncertainty:\n  bootstrap: "20"\n', 'ranking={"k": [5]}')
