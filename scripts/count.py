"""Snakemake script: per-node, per-document and per-item counts of one shard of one model."""

import json

from hieval.engine.icm import IcmParams
from hieval.pipeline import count_model
from hieval.resources import Resources
from hieval.workflow_script import run_rule


def main(smk):
    count_model(
        smk.input.gold,
        smk.input.predictions,
        levels_file=smk.input.levels,
        ancestors=smk.input.ancestors,
        max_level=smk.params.max_level,
        nodes_out=smk.output.nodes,
        docs_out=smk.output.docs,
        item_sums_out=smk.output.item_sums,
        params=IcmParams(**json.loads(smk.params.icm)),
        weights=smk.input.weights,
        # Machine settings come from the config, not params: they never change a number.
        resources=Resources(threads=smk.threads, **smk.config.get("engine", {})),
    )


run_rule(snakemake, main)  # noqa: F821
