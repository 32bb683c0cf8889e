"""report.paper_table / --paper-table / paper_table=: tables.tex and tables.md laid out as CAML's
and Edin et al.'s papers lay them out, every cell read from conventions.parquet. Checked against
values written in the test (Python's ``statistics.pstdev`` for Edin et al.'s ``np.std``, ddof 0),
the paper's rounding, and the CLI's conventions.parquet; a layout whose convention the run
leaves out is refused in one line."""

from __future__ import annotations

import statistics
from pathlib import Path

import polars as pl
import pytest
import yaml

import hieval
from hieval.cli import main
from hieval.config import ConfigError, validate_config
from hieval.reports.paper_layouts import layout_tables
from hieval.reports.paper_tables import to_latex, to_markdown

ROOT = Path(__file__).resolve().parents[1]


def _conventions(values: dict[tuple[str, str, str], float]) -> pl.DataFrame:
    return pl.DataFrame(
        [(m, c, metric, v) for (m, c, metric), v in values.items()],
        schema={"model": pl.String, "convention": pl.String, "metric": pl.String,
                "value": pl.Float64},
        orient="row",
    )  # fmt: skip


EDIN_METRICS = ("auc_micro", "auc_macro", "f1_micro", "f1_macro", "exact_match_ratio")


def test_edin_layout_is_mean_and_population_sd_of_each_systems_runs():
    runs = {"laat_1": 0.512, "laat_2": 0.538, "laat_3": 0.527, "caml": 0.4}
    values = {}
    for model, f1 in runs.items():
        for i, metric in enumerate(EDIN_METRICS):
            values[(model, "edin", metric)] = f1 + i / 100
        values[(model, "edin", "precision@8")] = f1 + 0.1
        values[(model, "hieval", "f1_micro")] = 0.99  # never read by the edin layout
    systems = {"laat_1": "LAAT", "laat_2": "LAAT", "laat_3": "LAAT"}
    (table,) = layout_tables(
        _conventions(values), layout="edin", models=list(runs), systems=systems
    )
    assert [name for name, _ in table.rows] == ["caml", "LAAT"]  # micro F1 ascending
    f1 = [100 * v + 2 for k, v in runs.items() if k.startswith("laat")]  # f1_micro is i=2
    laat_values, laat_sds = table.rows[1][1], table.sds[1]
    at = table.columns.index("Micro", 2)
    assert laat_values[at] == pytest.approx(statistics.fmean(f1), abs=1e-9)
    assert laat_sds[at] == pytest.approx(statistics.pstdev(f1), abs=1e-9)  # ddof 0
    assert laat_sds[at] != pytest.approx(statistics.stdev(f1), abs=1e-3)  # not ddof 1
    assert table.sds[0][at] == 0.0  # one run: np.std is 0
    markdown = to_markdown([table])
    assert "| AUC Micro | AUC Macro | F1 Micro | F1 Macro | EMR | Precision@k 8 |" in markdown
    mean, sd = statistics.fmean(f1), statistics.pstdev(f1)
    assert f"**{mean:.1f} ± {sd:.1f}**" in markdown
    assert f"\\textbf{{{mean:.1f}$\\pm${sd:.1f}}}" in to_latex([table])


def test_caml_layout_prints_fractions_with_three_decimals_and_no_sd():
    values = {
        ("a", "caml", "auc_macro"): 0.89512,
        ("a", "caml", "auc_micro"): 0.98649,
        ("a", "caml", "f1_macro"): 0.08849,
        ("a", "caml", "f1_micro"): 0.53913,
        ("a", "caml", "prec_at_8"): 0.70912,
        ("a", "caml", "prec_at_15"): 0.56121,
        ("b", "caml", "f1_micro"): 0.4,  # b without scores: no AUC, no P@k
    }
    (table,) = layout_tables(_conventions(values), layout="caml", models=["a", "b"])
    assert table.sds is None
    markdown = to_markdown([table])
    assert "| AUC Macro | AUC Micro | F1 Macro | F1 Micro | P@k 8 | P@k 15 |" in markdown
    assert (
        "| a | **0.895** | **0.986** | **0.088** | **0.539** | **0.709** | **0.561** |" in markdown
    )
    assert "| b | -- | -- | -- | 0.400 | -- | -- |" in markdown


def test_a_layout_without_its_convention_rows_says_so():
    values = {("a", "hieval", "f1_micro"): 0.5}
    (table,) = layout_tables(_conventions(values), layout="edin", models=["a"])
    assert "edin convention was not computed" in table.caption
    assert set(table.rows[0][1]) == {None}


@pytest.fixture
def files(tmp_path):
    gold = tmp_path / "gold.csv"
    codes = ("401.9", "428.0", "250.00", "486", "427.31", "584.9", "599.0", "285.9", "276.1")
    # every code has a gold positive (Edin et al.'s filter_codes keeps 9, enough for @8)
    gold.write_text(
        "doc_id,code\n" + "".join(f"d{i},{codes[(i + j) % 9]}\n" for i in range(6) for j in (0, 3))
    )
    pred = tmp_path / "pred.csv"
    rows = [
        f"d{i},{c},{(i * 7 + j * 3) % 10 / 10 + 0.05:.2f}\n"
        for i in range(6)
        for j, c in enumerate(codes)
    ]
    pred.write_text("doc_id,code,score\n" + "".join(rows))
    return gold, pred


def _run(files, tmp_path, *extra) -> tuple[int, Path]:
    gold, pred = files
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out)]
    return main([*argv, "--cache", str(tmp_path / "cache"), "--k", "8", *extra]), out


def test_cli_edin_layout_cells_are_the_edin_convention_rows(files, tmp_path):
    code, out = _run(files, tmp_path, "--paper-table", "edin")
    assert code == 0
    table = pl.read_parquet(out / "conventions.parquet").filter(convention="edin")
    edin = dict(table.select("metric", "value").iter_rows())
    markdown = (out / "tables.md").read_text()
    header, cells = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert header.split(" | ")[1:4] == ["AUC Micro", "AUC Macro", "F1 Micro"]
    expected = [
        f"**{100 * edin[m]:.1f} ± 0.0**"
        for m in ("auc_micro", "auc_macro", "f1_micro", "f1_macro", "exact_match_ratio",
                  "precision@8", "precision@recall", "map")
    ]  # fmt: skip
    assert cells == "| m | " + " | ".join(expected) + " |"
    assert "Edin et al. (2023) layout" in (out / "tables.tex").read_text()


def test_cli_default_layout_is_the_cophe_table(files, tmp_path):
    code, out = _run(files, tmp_path)
    assert code == 0
    assert "flat on leaf codes, set-based and CoPHE" in (out / "tables.md").read_text()


def test_a_layout_whose_convention_is_left_out_is_refused(files, tmp_path, capsys):
    code, out = _run(files, tmp_path, "--paper-table", "caml", "--conventions", "hieval", "edin")
    assert code != 0
    err = capsys.readouterr().err
    assert "paper_table caml" in err and "add caml to conventions" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_api_paper_table_keyword(files, tmp_path):
    gold, pred = files
    result = hieval.evaluate(gold, {"m": pred}, paper_table="caml", k=[8])
    out = result.write(tmp_path / "api")
    assert "Mullenbach et al. (2018) layout" in (out / "tables.md").read_text()
    tests = result.conventions_tests  # one model: no pair to test
    assert tests.height == 0 and tests.columns[:2] == ["model_a", "model_b"]
    with pytest.raises(hieval.HievalError, match="paper_table"):
        hieval.evaluate(gold, {"m": pred}, paper_table="nope")


def test_config_schema_key_and_its_check():
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    schema = ROOT / "workflow" / "schemas" / "config.schema.yaml"
    assert validate_config(dict(config), schema)["report"]["paper_table"] == "cophe"
    bad = {**config, "report": {"paper_table": "edin"}, "conventions": ["caml"]}
    with pytest.raises(ConfigError, match=r"report\.paper_table"):
        validate_config(bad, schema)
    with pytest.raises(ConfigError):
        validate_config({**config, "report": {"paper_table": "icd"}}, schema)


def test_the_layouts_have_one_source():
    from hieval import cli
    from hieval.conventions.registry import DEFAULT_PAPER_TABLE, PAPER_TABLES

    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    key = schema["properties"]["report"]["properties"]["paper_table"]
    assert key["enum"] == list(PAPER_TABLES) and key["default"] == DEFAULT_PAPER_TABLE
    shipped = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert shipped["report"]["paper_table"] == DEFAULT_PAPER_TABLE
    evaluate = cli.build_parser()._subparsers._group_actions[0].choices["evaluate"]
    action = next(a for a in evaluate._actions if a.dest == "paper_table")
    assert list(action.choices) == list(PAPER_TABLES) and action.default == DEFAULT_PAPER_TABLE
