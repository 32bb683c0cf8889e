"""The workflow's conventions rule: results/report/conventions.parquet, the config's choice of
conventions and the sheet's label_space, and the same rows as the CLI's for the same inputs."""

from __future__ import annotations

import polars as pl
from helpers import small_demo_config, snakemake


def test_workflow_writes_the_chosen_conventions_over_the_sheet_label_space(tmp_path):
    small_demo_config(tmp_path, documents=60, models=("over_predictor", "cautious_coder"))
    config = tmp_path / "config" / "config.yaml"
    config.write_text(
        config.read_text().replace("conventions: null", "conventions: [caml, edin_mullenbach]")
    )
    sheet = tmp_path / "config" / "models.tsv"
    header, *rows = sheet.read_text().splitlines()
    assert "label_space" not in header
    space = tmp_path / "space.txt"
    sheet.write_text(
        "\n".join(
            [header + "\tlabel_space"]
            + [row + ("\tspace.txt" if row.startswith("over_predictor") else "\t") for row in rows]
        )
        + "\n"
    )
    # the demo's gold is written by the workflow: the label space is its codes and more
    done = snakemake(tmp_path, "results/demo/gold.parquet")
    assert done.returncode == 0, done.stderr[-3000:]
    codes = sorted(
        set(pl.read_parquet(tmp_path / "results/demo/gold.parquet")["code"].drop_nulls())
    )
    space.write_text("\n".join([*codes, "001.0", "002.0"]) + "\n")
    done = snakemake(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    table = pl.read_parquet(tmp_path / "results/report/conventions.parquet")
    assert table.columns == ["model", "convention", "metric", "value"]
    assert table["convention"].unique(maintain_order=True).to_list() == ["caml", "edin_mullenbach"]
    assert table["model"].unique(maintain_order=True).to_list() == [
        "over_predictor",
        "cautious_coder",
    ]
    assert "f1_micro_mullenbach" in table["metric"].to_list()
    # over_predictor's label space is the gold's codes (and two more): its predictions of
    # other codes are left out of caml and edin, with a warning; cautious_coder's is observed
    log = (tmp_path / "logs/report/conventions.log").read_text()
    assert "outside the label space model sheet, model over_predictor" in log
    assert "cautious_coder: conventions caml, edin_mullenbach over the" in log
