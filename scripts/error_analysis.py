"""Snakemake script: error distance, near-miss confusions and per-code tables of every model."""

import json

from hieval.analysis_stage import error_analysis
from hieval.metrics.uncertainty_settings import Settings
from hieval.workflow_script import run_rule


def main(smk):
    models = smk.params.models
    error_analysis(
        gold=smk.input.gold,
        labels=dict(zip(models, smk.input.labels, strict=True)),
        levels_file=smk.input.levels,
        ancestors=smk.input.ancestors,
        max_level=smk.params.max_level,
        errors_out=smk.output.errors,
        confusions_out=dict(zip(models, smk.output.confusions, strict=True)),
        codes_out=dict(zip(models, smk.output.codes, strict=True)),
        train_gold=smk.input.get("train_gold"),
        settings=Settings(**json.loads(smk.params.uncertainty)),
    )


run_rule(snakemake, main)  # noqa: F821
