"""One unit per metric in every text a report writes: summary.md prints P, R, F1, AUC, the
ranking metrics and the suite's shares in percent, as the HTML report and the papers do; ICM in
bits, ICM-Norm, Brier, ECE and thresholds as they are. The tables for programs keep fractions.

The expected cells are worked here from the tidy values (100 × value, one decimal), not by
hieval's formatting helpers."""

from __future__ import annotations

import polars as pl

from hieval.metrics import registry
from hieval.reports.summary import summary_markdown

#: Shares in [0, 1] that summary.md must print in percent, and the ones it keeps as they are.
SHARES = {"LB-ACC", "LB-F", "EB-P", "EB-R", "EB-F", "EB-HAMM", "EB-JACC", "EB-SUBACC",
          "PROP-F", "HF", "LCA-F", "EM", "FPR-micro", "FPR-macro"}  # fmt: skip
AS_THEY_ARE = {"ICM", "ICM-Norm"}


def _tidy() -> pl.DataFrame:
    rows = []
    for i, metric in enumerate(registry.SUITE):
        value = 12.5 if metric.paper == "ICM" else 0.1234 + i / 100
        rows.append(
            ("m", metric.family, registry.paper_level(metric), metric.average, metric.metric, value)
        )
    for family in ("flat", "set", "cophe"):
        for metric, value in (("precision", 0.5), ("recall", 0.25), ("f1", 1 / 3)):
            rows.append(("m", family, "leaf" if family == "flat" else "overall", "micro",
                         metric, value))  # fmt: skip
    rows += [
        ("m", "ranking", "leaf", "micro", "auc", 0.87654),
        ("m", "calibration", "leaf", "micro", "brier", 0.003),
        ("m", "calibration", "leaf", "micro", "ece", 0.0021),
        ("m", "selection", "leaf", "global", "threshold", 0.4),
    ]
    return pl.DataFrame(
        rows, schema=["model", "family", "level", "average", "metric", "value"], orient="row"
    )


def _table(markdown: str, heading: str) -> dict[str, str]:
    """The one model row of the table under ``heading``: column name -> cell."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"## {heading}"))
    table = [line for line in lines[start:] if line.startswith("|")][:3]
    head = [c.strip() for c in table[0].strip("|").split("|")]
    row = [c.strip() for c in table[2].strip("|").split("|")]
    return dict(zip(head, row, strict=True))


def _summary() -> str:
    return summary_markdown(
        _tidy(), levels=("e2", "e1", "e0", "c"), models=["m"], records=[], hierarchy="test"
    )


def test_the_suite_table_prints_shares_in_percent():
    tidy, cells = _tidy(), _table(_summary(), "ICM and the comparison metrics")
    value = {m.paper: v for m, v in zip(registry.SUITE, tidy["value"], strict=False)}
    assert set(value) == SHARES | AS_THEY_ARE
    for name in SHARES:
        assert cells[name] == f"{100 * value[name]:.1f}", name
    assert cells["ICM"] == "12.5"
    assert cells["ICM-Norm"] == f"{value['ICM-Norm']:.4g}"


def test_the_score_table_prints_auc_in_percent_and_losses_as_they_are():
    cells = _table(_summary(), "Scores")
    assert cells["auc (micro)"] == "87.7"
    assert cells["brier (micro)"] == "0.003"
    assert cells["ece (micro)"] == "0.0021"
    assert cells["threshold (global)"] == "0.4"


def test_the_headline_table_prints_percent_and_never_a_perfect_score_it_is_not():
    tidy = _tidy().with_columns(
        pl.when((pl.col("family") == "flat") & (pl.col("metric") == "precision"))
        .then(0.99996)
        .otherwise(pl.col("value"))
        .alias("value")
    )
    markdown = summary_markdown(
        tidy, levels=("e2", "e1", "e0", "c"), models=["m"], records=[], hierarchy="test"
    )
    lines = markdown.splitlines()
    header = next(line for line in lines if line.startswith("| Model |"))
    row = lines[lines.index(header) + 2]
    cells = dict(
        zip(
            [c.strip() for c in header.strip("|").split("|")],
            [c.strip() for c in row.strip("|").split("|")],
            strict=True,
        )
    )
    assert cells["Flat P"] == "> 99.9"
    assert cells["Flat R"] == "25.0" and cells["Set F1"] == "33.3"
