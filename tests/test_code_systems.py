"""Code systems end to end: a user's tree read verbatim (CLI, workflow, ICM against pyevall),
MIMIC-IV tables as the gold, the ICD-10 demo, and every refusal of issue 13."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest
import yaml
from helpers import REPO, SNAKEMAKE_COMMAND

from hieval import cli
from hieval.config import validate_config
from hieval.errors import ConfigError, HievalError
from hieval.experiments.paper import table1_markdown
from hieval.hierarchy.sources import load_source

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
ICD10_ARGS = ("evaluate", "--hierarchy", "icd10", "--cache")
QUIET = ("--cores", "2", "--quiet", "progress", "rules", "host")

# A tree whose labels no ICD syntax would accept as written: case matters (A00.0 and a00.0 are
# two nodes), a lower-case b23, a PCS-looking 009430Z under a CM-looking A00.0, and words.
NESTED = {
    "A00": {"A00.0": ["009430Z", "a00.0"], "b23": []},
    "pets": {"dog": ["dog puppy"], "cat": []},
}
GOLD = {
    "d1": ["009430Z", "b23"],
    "d2": ["dog"],
    "d3": ["a00.0", "dog puppy"],
    "d4": ["cat", "A00.0"],
}
PRED = {"d1": ["009430Z", "a00.0"], "d2": ["dog puppy"], "d3": ["a00.0"], "d4": []}


def write_tree(path: Path) -> Path:
    rows = ["child,parent"]
    for top, children in NESTED.items():
        rows.append(f"{top},")
        for child, leaves in children.items():
            rows.append(f"{child},{top}")
            rows += [f"{leaf},{child}" for leaf in leaves]
    path.write_text("\n".join(rows) + "\n")
    return path


def write_labels(path: Path, labels: dict, pad: bool = False) -> Path:
    rows = [(d, f"  {c} " if pad else c) for d, codes in labels.items() for c in codes or [""]]
    pl.DataFrame(rows, schema=["doc_id", "code"], orient="row").write_csv(path)
    return path


def pyevall_icm(tmp_path: Path) -> dict:
    from pyevall.evaluation import PyEvALLEvaluation
    from pyevall.metrics.metricfactory import MetricFactory
    from pyevall.utils.utils import PyEvALLUtils

    gold_file, pred_file = tmp_path / "pv_gold.json", tmp_path / "pv_pred.json"
    gold_file.write_text(
        json.dumps([{"test_case": "T", "id": d, "value": v} for d, v in GOLD.items()])
    )
    pred_file.write_text(
        json.dumps([{"test_case": "T", "id": d, "value": v} for d, v in PRED.items() if v])
    )
    report = PyEvALLEvaluation().evaluate(
        str(pred_file),
        str(gold_file),
        [MetricFactory.ICM.value, MetricFactory.ICMNorm.value],
        **{
            PyEvALLUtils.PARAM_REPORT: PyEvALLUtils.PARAM_OPTION_REPORT_DATAFRAME,
            PyEvALLUtils.PARAM_HIERARCHY: NESTED,
        },
    )
    return report.df_average.to_dict("records")[0]


def value(metrics: pl.DataFrame, family: str, level: str, average: str, metric: str) -> float:
    row = metrics.filter(
        pl.col("family") == family,
        pl.col("level") == level,
        pl.col("average") == average,
        pl.col("metric") == metric,
    )
    assert row.height == 1, (family, level, average, metric)
    return row["value"][0]


def test_user_tree_verbatim_through_the_cli_and_icm_matches_pyevall(tmp_path):
    tree = write_tree(tmp_path / "tree.csv")
    gold = write_labels(tmp_path / "gold.csv", GOLD, pad=True)  # spaces around are trimmed
    pred = write_labels(tmp_path / "pred.csv", PRED)
    out = tmp_path / "eval"
    args = ["evaluate", "--hierarchy", str(tree), "--gold", str(gold), "--pred", f"m={pred}"]
    assert cli.main([*args, "--out", str(out), "--icm-empty-gold", "drop"]) == 0
    metrics = pl.read_parquet(out / "metrics.parquet")
    # flat: exact names; d1 {009430Z} hit, a00.0 false; d2 miss+false; d3 hit; d4 two misses
    assert value(metrics, "flat", "leaf", "micro", "tp") == 2
    assert value(metrics, "flat", "leaf", "micro", "fp") == 2
    assert value(metrics, "flat", "leaf", "micro", "fn") == 5
    # the default max_level of one's own tree is its highest level below the root (d1)
    assert set(metrics.filter(pl.col("family") == "cophe")["level"]) == {
        "d1",
        "d2",
        "d3",
        "overall",
    }
    assert "flat_dx" not in set(metrics["family"])  # no dx/proc split in a verbatim tree
    reference = pyevall_icm(tmp_path)
    assert value(metrics, "icm", "overall", "mean", "icm") == pytest.approx(
        float(reference["ICM"]), abs=1e-9
    )
    assert value(metrics, "icm", "overall", "mean", "icm_norm") == pytest.approx(
        float(reference["ICM-Norm"]), abs=1e-9
    )
    assert "Code system: verbatim" in (out / "summary.md").read_text()


def test_user_tree_through_the_workflow(tmp_path):
    write_tree(tmp_path / "tree.csv")
    write_labels(tmp_path / "gold.csv", GOLD)
    write_labels(tmp_path / "pred.csv", PRED)
    (tmp_path / "models.tsv").write_text("model\tpredictions\nm\tpred.csv\n")
    (tmp_path / "my.yaml").write_text(
        "hierarchy: {source: file, path: tree.csv}\ngold: gold.csv\nmodels: models.tsv\n"
        "icm: {empty_gold: drop}\n"
    )
    result = run_snakemake(tmp_path, "--configfile", "my.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "results/my/paper/table1.md").exists()  # ICD-9's Table 1: not here
    metrics = pl.read_parquet(tmp_path / "results/my/report/metrics.parquet")
    assert value(metrics, "icm", "overall", "mean", "icm") == pytest.approx(
        float(pyevall_icm(tmp_path)["ICM"]), abs=1e-9
    )
    assert value(metrics, "flat", "leaf", "micro", "tp") == 2


def test_cophe_pcs_style_json_with_six_parents(tmp_path):
    """CoPHE's ICD10/icd10_pcs_graph_desc.json layout: leaves only, six parents (the code
    itself, then its prefixes); named-only prefixes become nodes."""
    graph = {
        code: {"label": code, "parents": [code[:n] for n in range(7, 1, -1)]}
        for code in ("0DTJ4ZZ", "0DTJ0ZZ", "0DTN4ZZ", "02HV33Z")
    }
    path = tmp_path / "icd10_pcs_graph_desc.json"
    path.write_text(json.dumps(graph))
    table, leaves = load_source("file", path)
    assert table.levels == ("d6", "d5", "d4", "d3", "d2", "d1", "root")
    assert table.code_system == "verbatim" and sorted(leaves) == sorted(graph)
    rows = table.ancestors().filter(pl.col("code") == "0DTJ4ZZ").rows()
    assert [anc for _c, _lv, anc in rows] == [
        "0DTJ4ZZ",
        "0DTJ4Z",
        "0DTJ4",
        "0DTJ",
        "0DT",
        "0D",
        "@",
    ]
    # through the CLI, labels verbatim
    gold = write_labels(tmp_path / "g.csv", {"x": ["0DTJ4ZZ"], "y": ["02HV33Z"]})
    pred = write_labels(tmp_path / "p.csv", {"x": ["0DTJ0ZZ"], "y": ["02HV33Z"]})
    out = tmp_path / "eval"
    argv = ["evaluate", "--hierarchy", str(path), "--gold", str(gold), "--pred", f"m={pred}"]
    assert cli.main([*argv, "--out", str(out)]) == 0
    metrics = pl.read_parquet(out / "metrics.parquet")
    assert value(metrics, "cophe", "d3", "micro", "tp") == 2  # 0DTJ shared, 02HV shared


def test_other_json_conflicts_are_refused(tmp_path):
    graph = {
        "a1": {"parents": ["a1", "A", "X"]},
        "a2": {"parents": ["a2", "A", "Y"]},  # A under X and under Y
    }
    path = tmp_path / "g.json"
    path.write_text(json.dumps(graph))
    with pytest.raises(HievalError, match="'A' has no entry of its own"):
        load_source("file", path)


# --- MIMIC-IV tables ---------------------------------------------------------------------------


def gz(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode()))
    return path


@pytest.fixture(scope="module")
def cache(icd10_cache) -> Path:
    """The CLI's --cache, holding the ICD-10 tree built once for the test run (conftest)."""
    return icd10_cache


def test_mimic4_tables_pooled_other_version_counted(tmp_path, cache):
    diagnoses = gz(
        tmp_path / "diagnoses_icd.csv.gz",
        "subject_id,hadm_id,seq_num,icd_code,icd_version\n"
        "1,100,1,E119,10\n1,100,2,I10,10\n1,100,3,4019,9\n2,200,1,S72001A,10\n3,300,1,25000,9\n",
    )
    procedures = gz(
        tmp_path / "procedures_icd.csv.gz",
        "subject_id,hadm_id,seq_num,chartdate,icd_code,icd_version\n"
        "1,100,1,2180-01-01,0DTJ4ZZ,10\n2,200,1,2180-01-02,B211YZZ,10\n3,300,1,2180-01-03,3893,9\n",
    )
    pred = tmp_path / "pred.csv"
    pred.write_text("doc_id,code\n100,E11.9\n100,0DTJ4ZZ\n200,S72.001A\n200,B211YZZ\n")
    out = tmp_path / "eval"
    argv = ["evaluate", "--hierarchy", "icd10", "--cache", str(cache), "--out", str(out)]
    argv += ["--gold", str(diagnoses), "--gold", str(procedures), "--pred", f"m={pred}"]
    assert cli.main(argv) == 0
    record = json.loads((out / "work/inputs/gold.json").read_text())
    assert record["other_version_rows"] == 3  # 4019, 25000 (dx) and 3893 (proc)
    assert record["format"] == "mimic4_icd10" and len(record["files"]) == 2
    assert record["labels"] == 5 and record["documents"] == 2
    gold = pl.read_parquet(out / "work/inputs/gold.parquet")
    assert sorted(gold["code"]) == ["0DTJ4ZZ", "B211YZZ", "E11.9", "I10", "S72.001A"]
    metrics = pl.read_parquet(out / "metrics.parquet")
    assert value(metrics, "flat", "leaf", "micro", "tp") == 4
    assert value(metrics, "flat", "leaf", "micro", "fn") == 1
    assert "3 rows of ICD-9 skipped" in (out / "summary.md").read_text()


# --- refusals --------------------------------------------------------------------------------


def refused(capsys, argv: list[str], *fragments: str) -> str:
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in " ".join(err.split()), err
    return err


def test_icd9_codes_in_an_icd10_evaluation(tmp_path, cache, capsys):
    gold = write_labels(tmp_path / "g.csv", {"d": ["401.9", "250.00", "96.04"]})
    out = tmp_path / "eval"
    refused(
        capsys,
        [*ICD10_ARGS, str(cache), "--gold", str(gold), "--pred", f"m={gold}", "--out", str(out)],
        "look like ICD-9",
        "set --hierarchy package (or cms, cophe: ICD-9-CM)",
    )
    assert not out.exists()


def test_icd10_codes_in_an_icd9_evaluation(tmp_path, capsys):
    gold = write_labels(tmp_path / "g.csv", {"d": ["A00.0", "S72.001A", "I10"]})
    refused(
        capsys,
        ["evaluate", "--gold", str(gold), "--pred", f"m={gold}", "--out", str(tmp_path / "o")],
        "look like ICD-10",
        "set --hierarchy icd10",
    )


def test_place_is_refused_for_a_verbatim_tree(tmp_path, capsys):
    tree = write_tree(tmp_path / "tree.csv")
    gold = write_labels(tmp_path / "g.csv", GOLD)
    argv = ["evaluate", "--hierarchy", str(tree), "--gold", str(gold), "--pred", f"m={gold}"]
    refused(
        capsys,
        [*argv, "--out", str(tmp_path / "o"), "--unknown-codes", "place"],
        "code system is verbatim",
        "set --unknown-codes error",
    )
    with pytest.raises(ConfigError, match="read verbatim"):
        validate_config(
            {
                "gold": "g",
                "hierarchy": {"source": "file", "path": "t.csv"},
                "unknown_codes": "place",
            },
            SCHEMA,
        )


def test_unknown_label_of_a_verbatim_tree_is_an_error_by_default(tmp_path, capsys):
    tree = write_tree(tmp_path / "tree.csv")
    gold = write_labels(tmp_path / "g.csv", {"d": ["Dog"]})  # case matters
    argv = ["evaluate", "--hierarchy", str(tree), "--gold", str(gold), "--pred", f"m={gold}"]
    refused(capsys, [*argv, "--out", str(tmp_path / "o")], "'Dog'", "case included")


def test_mimic4_format_of_the_other_version_is_refused(tmp_path, cache, capsys):
    diagnoses = gz(
        tmp_path / "diagnoses_icd.csv.gz",
        "subject_id,hadm_id,seq_num,icd_code,icd_version\n1,100,1,E119,10\n",
    )
    argv = ["evaluate", "--hierarchy", "icd10", "--cache", str(cache), "--gold", str(diagnoses)]
    argv += [
        "--pred",
        f"m={diagnoses}",
        "--format",
        "gold=mimic4_icd9",
        "--out",
        str(tmp_path / "o"),
    ]
    refused(capsys, argv, "keeps the ICD-9 rows", "mimic4_icd10")


def test_ambiguous_undotted_code_needs_a_code_type(tmp_path, cache, capsys):
    gold = write_labels(tmp_path / "g.csv", {"d": ["B200ZZZ", "E119"]})
    argv = ["evaluate", "--hierarchy", "icd10", "--cache", str(cache), "--gold", str(gold)]
    refused(capsys, [*argv, "--pred", f"m={gold}", "--out", str(tmp_path / "o")], "ambiguous code")


def test_paper_table1_refuses_other_code_systems(tmp_path):
    table, _ = load_source("file", write_tree(tmp_path / "tree.csv"))
    with pytest.raises(HievalError, match="ICD-9 evaluations only"):
        table1_markdown(table)


def test_max_level_of_icd10_checked_before_anything_runs():
    with pytest.raises(ConfigError, match="not a level of the ICD-10 hierarchy"):
        validate_config({"gold": "g", "hierarchy": {"source": "icd10"}, "max_level": "c"}, SCHEMA)


# --- the ICD-10 demo -----------------------------------------------------------------------------


def run_snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """The repository's Snakefile in ``workdir`` (as tests/helpers.py, with a longer timeout:
    the ICD-10 demo counts four models over the 295,000-node tree)."""
    return subprocess.run(
        [*SNAKEMAKE_COMMAND, *args, "-s", str(REPO / "Snakefile"), "-d", str(workdir), *QUIET],
        capture_output=True,
        text=True,
        cwd=workdir,
        timeout=1200,
    )


def test_icd10_demo_runs_end_to_end(tmp_path, icd10_built):
    shutil.copytree(REPO / "config", tmp_path / "config")
    # the tree as the first run on a machine leaves it (the CLI's build is tested elsewhere)
    shutil.copytree(icd10_built, tmp_path / "resources/hierarchy/icd10")
    config = yaml.safe_load((REPO / "config/test/icd10.yaml").read_text())
    config["demo"]["documents"] = 300  # the shipped demo's 1,000, smaller for the test suite
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(tmp_path, "--configfile", "small.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = (tmp_path / "results/small/report/summary.md").read_text()
    assert "Code system: icd10" in summary and "block" in summary
    assert not (tmp_path / "results/small/paper/table1.md").exists()
    record = json.loads((tmp_path / "results/small/inputs/gold.json").read_text())
    assert record["other_version_rows"] > 0 and len(record["files"]) == 2
    metrics = pl.read_parquet(tmp_path / "results/small/report/metrics.parquet")
    assert set(metrics["model"]) == {
        "sibling_confuser",
        "over_predictor",
        "cautious_coder",
        "distant_guesser",
    }
    # the demo's design: the sibling confuser gains most from the hierarchy
    flat = value(
        metrics.filter(pl.col("model") == "sibling_confuser"), "flat", "leaf", "micro", "f1"
    )
    cophe = value(
        metrics.filter(pl.col("model") == "sibling_confuser"), "cophe", "overall", "micro", "f1"
    )
    assert cophe > flat + 0.05
    log = (tmp_path / "logs/small/hierarchy/build_levels.log").read_text()
    assert "ICD-10 hierarchy from the cache" in log  # read, not rebuilt
