"""Snakemake script: the tables over all models (metrics.parquet/.csv, summary.csv/.md)."""

from pathlib import Path

from hieval import paths
from hieval.engine.counts import evaluated_levels
from hieval.hierarchy.table import level_order
from hieval.pipeline import read_records
from hieval.report import combine, write_reports
from hieval.workflow_script import run_rule


def main(smk, log):
    levels = evaluated_levels(level_order(smk.input.levels), smk.params.max_level)
    tidy = combine([paths.read_parquet(p) for p in smk.input.metrics], levels, smk.params.models)
    write_reports(
        tidy,
        Path(smk.output.metrics).parent,
        levels,
        smk.params.models,
        read_records(smk.input.records),
        smk.params.hierarchy,
    )
    log(f"{tidy.height} metric rows for {len(smk.params.models)} models")


run_rule(snakemake, main)  # noqa: F821
