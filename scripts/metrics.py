"""Snakemake script: tidy metrics and the per-node over/under-prediction report of one model."""

import json

from hieval.engine.icm import IcmParams
from hieval.pipeline import model_metrics
from hieval.workflow_script import run_rule


def main(smk):
    model_metrics(
        model=smk.wildcards.model,
        nodes=smk.input.nodes,
        docs=smk.input.docs,
        item_sums=smk.input.item_sums,
        levels_file=smk.input.levels,
        params=IcmParams(**json.loads(smk.params.icm)),
        label_set=smk.params.label_set,
        metrics_out=smk.output.metrics,
        nodes_report_out=smk.output.nodes_report,
    )


run_rule(snakemake, main)  # noqa: F821
