"""Snakemake script: ICM node weights of one model from the whole gold (shared by its shards)."""

import json

from hieval.engine.icm import IcmParams
from hieval.pipeline import icm_weights
from hieval.workflow_script import run_rule


def main(smk):
    icm_weights(
        smk.input.gold,
        smk.input.predictions,
        levels_file=smk.input.levels,
        ancestors=smk.input.ancestors,
        out=smk.output[0],
        params=IcmParams(**json.loads(smk.params.icm)),
    )


run_rule(snakemake, main)  # noqa: F821
