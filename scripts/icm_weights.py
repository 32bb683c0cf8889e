"""Snakemake script: ICM node weights of one model from the whole gold (shared by its shards)."""

import json

from hieval.engine.icm import IcmParams
from hieval.pipeline import icm_weights
from hieval.workflow_script import run_rule


def main(smk, log):
    weights = icm_weights(
        smk.input.gold,
        smk.input.predictions,
        smk.input.levels,
        smk.input.ancestors,
        smk.output[0],
        IcmParams(**json.loads(smk.params.icm)),
    )
    log(f"{weights.height} node weights")


run_rule(snakemake, main)  # noqa: F821
