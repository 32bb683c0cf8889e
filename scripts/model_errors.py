"""Snakemake script: one model's error distance rows, near-miss confusions and per-code table."""

import json

from hieval.analysis_stage import model_error_analysis
from hieval.metrics.uncertainty.settings import Settings
from hieval.workflow_script import run_rule


def main(smk):
    model_error_analysis(
        model=smk.wildcards.model,
        gold=smk.input.gold,
        labels=smk.input.labels,
        nodes=smk.input.nodes,
        levels_file=smk.input.levels,
        ancestors=smk.input.ancestors,
        max_level=smk.params.max_level,
        distance_out=smk.output.distance,
        confusions_out=smk.output.confusions,
        codes_out=smk.output.codes,
        train_gold=smk.input.get("train_gold"),
        settings=Settings(**json.loads(smk.params.uncertainty)),
    )


run_rule(snakemake, main)  # noqa: F821
