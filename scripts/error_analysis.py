"""Snakemake script: every model's error distance rows, near-miss confusions and per-code
table, and errors.parquet, the error distance rows of all models, in one process."""

import json
from pathlib import Path

from hieval.analysis_stage import error_analysis
from hieval.metrics.uncertainty.settings import Settings
from hieval.workflow_script import run_rule


def main(smk):
    models = list(smk.params.models)
    error_analysis(
        gold=smk.input.gold,
        labels=dict(zip(models, smk.input.labels, strict=True)),
        nodes=dict(zip(models, smk.input.nodes, strict=True)),
        levels_file=smk.input.levels,
        ancestors=smk.input.ancestors,
        max_level=smk.params.max_level,
        work=Path(smk.output.distance[0]).parent,
        errors_out=smk.output.errors,
        confusions_out=dict(zip(models, smk.output.confusions, strict=True)),
        codes_out=dict(zip(models, smk.output.codes, strict=True)),
        train_gold=smk.input.get("train_gold"),
        settings=Settings(**json.loads(smk.params.uncertainty)),
    )


run_rule(snakemake, main)  # noqa: F821
