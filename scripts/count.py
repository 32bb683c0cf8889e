"""Snakemake script: per-node, per-document and per-item counts of one shard of one model."""

import json

from hieval.engine.icm import IcmParams
from hieval.pipeline import Engine, count_model
from hieval.workflow_script import run_rule


def main(smk, log):
    count_model(
        smk.input.gold,
        smk.input.predictions,
        smk.input.levels,
        smk.input.ancestors,
        smk.params.max_level,
        smk.output.nodes,
        smk.output.docs,
        smk.output.icm_items,
        icm_params=IcmParams(**json.loads(smk.params.icm)),
        weights=smk.input.weights,
        engine=Engine(threads=smk.threads, **smk.config.get("engine", {})),
        log=log,
    )


run_rule(snakemake, main)  # noqa: F821
