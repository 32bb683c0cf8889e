"""Snakemake script: the tables over all models (metrics.parquet/.csv, summary.csv/.md)."""

import json
from pathlib import Path

from hieval.pipeline import final_reports
from hieval.workflow_script import run_rule


def main(smk):
    final_reports(
        metrics=[*smk.input.metrics, *smk.input.ranking],
        notes=list(smk.input.notes),
        records=list(smk.input.records),
        levels_file=smk.input.levels,
        max_level=smk.params.max_level,
        models=smk.params.models,
        hierarchy=smk.params.hierarchy,
        out_dir=Path(smk.output.metrics).parent,
        intervals=smk.input.get("intervals"),
        comparisons=smk.input.get("comparisons"),
        systems=json.loads(smk.params.systems),
    )


run_rule(snakemake, main)  # noqa: F821
