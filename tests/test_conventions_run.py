"""conventions.parquet through the entry points: the CLI's --conventions and --label-space, the
API's ``conventions=`` and ``Evaluation.conventions``, the config schema's names; the
``hieval`` convention's rows are the tidy table's; bad settings refused in one line."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

import hieval
from hieval.cli import main
from hieval.conventions.registry import NAMES
from hieval.conventions.table import decision_threshold

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def files(tmp_path):
    gold = tmp_path / "gold.csv"
    gold.write_text("doc_id,code\na,401.9\na,428.0\nb,250.00\nb,38.93\nc,E849.7\nc,401.9\nd,486\n")
    pred = tmp_path / "pred.csv"
    pred.write_text(
        "doc_id,code,score\na,401.9,0.9\na,428.0,0.4\na,486,0.5\nb,250.00,0.7\nb,38.93,0.2\n"
        "c,E849.7,0.6\nc,427.31,0.55\nd,486,0.8\nd,401.9,0.3\n"
    )
    return gold, pred


def run(files, tmp_path, *extra) -> tuple[int, Path]:
    gold, pred = files
    out = tmp_path / "out"
    argv = ["evaluate", "--gold", str(gold), "--pred", f"m={pred}", "--out", str(out)]
    return main([*argv, "--cache", str(tmp_path / "cache"), *extra]), out


def test_every_convention_by_default_and_hieval_rows_are_the_tidy_rows(files, tmp_path):
    code, out = run(files, tmp_path, "--k", "2")
    assert code == 0
    table = pl.read_parquet(out / "conventions.parquet")
    assert table.columns == ["model", "convention", "metric", "value"]
    assert table["convention"].unique(maintain_order=True).to_list() == list(NAMES)
    ours = table.filter(pl.col("convention") == "hieval")
    tidy = pl.read_parquet(out / "metrics.parquet")

    def tidy_value(family, average, metric):
        row = tidy.filter(family=family, level="leaf", average=average, metric=metric)
        return row["value"].item()

    mine = dict(zip(ours["metric"], ours["value"], strict=True))
    assert mine["f1_micro"] == tidy_value("flat", "micro", "f1")
    assert mine["f1_macro"] == tidy_value("flat", "macro", "f1")
    assert mine["auc_macro"] == tidy_value("ranking", "macro", "auc")
    assert mine["precision@2"] == tidy_value("ranking", "mean", "precision@2")
    caml = dict(table.filter(convention="caml").select("metric", "value").iter_rows())
    # hand-worked: decided (score >= 0.5) a:401.9,486 b:250.00 c:E849.7,427.31 d:486
    # tp 4 (401.9, 250.00, E849.7, 486), predicted 6, gold 7
    assert caml["prec_micro"] == pytest.approx(4 / 6)
    assert caml["rec_micro"] == pytest.approx(4 / 7)
    # Edin et al. decide score > 0.5: a's 486 at exactly 0.5 is no prediction there
    edin = dict(table.filter(convention="edin_mullenbach").select("metric", "value").iter_rows())
    assert edin["precision_micro_mullenbach"] == pytest.approx(4 / (5 + 1e-10))


def test_conventions_chosen_and_label_space_given(files, tmp_path):
    space = tmp_path / "codes.txt"
    space.write_text("401.9\n428.0\n250.00\n38.93\nE849.7\n486\n427.31\n001.0\n002.0\n\n")
    code, out = run(files, tmp_path, "--conventions", "caml", "--label-space", f"m={space}")
    assert code == 0
    table = pl.read_parquet(out / "conventions.parquet")
    assert table["convention"].unique().to_list() == ["caml"]
    caml = dict(table.select("metric", "value").iter_rows())
    # two labels never seen add 0 to the sums of 9 labels' P and R
    code, out = run(files, tmp_path, "--conventions", "caml")
    observed = dict(
        pl.read_parquet(out / "conventions.parquet").select("metric", "value").iter_rows()
    )
    assert caml["prec_macro"] == pytest.approx(observed["prec_macro"] * 7 / 9)


def test_label_space_without_a_gold_code_is_refused(files, tmp_path, capsys):
    space = tmp_path / "codes.txt"
    space.write_text("4019\n4280\n")  # undotted: the gold is normalised dotted
    code, out = run(files, tmp_path, "--label-space", f"m={space}")
    err = capsys.readouterr().err
    assert code == 1
    assert "none of the gold's codes is in the label space" in err
    assert "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--label-space", "other=x.txt"], "no model 'other'"),
        (["--conventions", "cophe"], "invalid choice: 'cophe'"),
    ],
)
def test_bad_convention_settings(files, tmp_path, capsys, extra, message):
    try:
        code, _ = run(files, tmp_path, *extra)
    except SystemExit as exc:  # argparse's refusal of a choice
        code = exc.code
    out = tmp_path / "out"
    assert code != 0
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_api_conventions(files, tmp_path):
    gold, pred = files
    ev = hieval.evaluate(gold, {"m": pred}, cache=tmp_path / "cache", conventions=["edin"])
    assert ev.conventions["convention"].unique().to_list() == ["edin"]
    assert ev.conventions["model"].unique().to_list() == ["m"]
    with pytest.raises(hieval.HievalError, match="invalid choice"):
        hieval.evaluate(gold, {"m": pred}, cache=tmp_path / "cache", conventions=["nope"])


def test_config_schema_names_the_registry_conventions():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text("utf-8"))
    assert schema["properties"]["conventions"]["items"]["enum"] == list(NAMES)


def test_decision_threshold_follows_the_normalisation():
    tuned = {"tuned_threshold": {"threshold": 0.31, "per_code": 0}}
    assert decision_threshold(tuned, threshold=None, top_k=None, default="tune") == 0.31
    per_code = {"tuned_threshold": {"threshold": 0.31, "per_code": 4}}
    assert decision_threshold(per_code, threshold=None, top_k=None, default=0.5) is None
    assert decision_threshold({}, threshold=0.7, top_k=3, default=0.5) == 0.7
    assert decision_threshold({}, threshold=None, top_k=3, default=0.5) is None
    assert decision_threshold({}, threshold=None, top_k=None, default=0.5) == 0.5


def test_summary_shows_the_conventions_side_by_side_and_why_they_differ(files, tmp_path):
    code, out = run(files, tmp_path, "--k", "2")
    assert code == 0
    summary = (out / "summary.md").read_text()
    section = summary.split("## Conventions", 1)[1].split("## Input notes", 1)[0]
    table = pl.read_parquet(out / "conventions.parquet")
    f1 = dict(
        table.filter(pl.col("metric").is_in(["f1_micro", "f1_micro_mullenbach"]))
        .select("convention", "value")
        .iter_rows()
    )
    for convention in NAMES:
        value = f"{100 * f1[convention]:.1f}"
        assert f"| m | {convention} | {value} |" in section
    # edin_mullenbach's micro-F1 differs from hieval's only by a's score of exactly 0.5
    assert f1["edin_mullenbach"] != f1["hieval"]
    assert "edin_mullenbach decides score > threshold where hieval decides" in section
    assert "over the 7 codes observed in the gold and its predictions" in section
    assert "Edin et al.'s decisions: score > 0.5." in section
