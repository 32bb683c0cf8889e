"""Snakemake script: one model's ranking, calibration and selection rows from its scores."""

import json

from hieval.engine.icm import IcmParams
from hieval.pipeline import score_metrics
from hieval.workflow_script import run_rule


def main(smk):
    score_metrics(
        model=smk.wildcards.model,
        gold=smk.input.gold,
        scores=smk.input.scores,
        record=smk.input.record,
        levels_file=smk.input.levels,
        ancestors=smk.input.ancestors,
        max_level=smk.params.max_level,
        ks=tuple(smk.params.ks),
        metrics_out=smk.output.metrics,
        notes_out=smk.output.notes,
        train_gold=smk.input.get("train_gold"),
        params=IcmParams(**json.loads(smk.params.icm)),
    )


run_rule(snakemake, main)  # noqa: F821
