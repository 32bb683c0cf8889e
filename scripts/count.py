"""Snakemake script: per-node, per-document and per-item (ICM) counts of one model (DuckDB)."""

import json

from hieval.icm import IcmParams
from hieval.pipeline import count_model
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
        IcmParams(**json.loads(smk.params.icm)),
        smk.threads,
        log,
    )


run_rule(snakemake, main)  # noqa: F821
