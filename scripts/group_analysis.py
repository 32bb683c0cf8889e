"""Snakemake script: headline metrics (ICM included) per group of documents, and the largest
gaps."""

import json

from hieval.analysis_stage import group_analysis
from hieval.engine.icm import IcmParams
from hieval.metrics.uncertainty.settings import Settings
from hieval.workflow_script import run_rule


def main(smk):
    group_analysis(
        gold=smk.input.gold,
        docs=dict(zip(smk.params.models, smk.input.docs, strict=True)),
        labels=dict(zip(smk.params.models, smk.input.labels, strict=True)),
        levels_file=smk.input.levels,
        ancestors=smk.input.ancestors,
        params=IcmParams(**json.loads(smk.params.icm)),
        doc_groups=smk.input.doc_groups,
        settings=Settings(**json.loads(smk.params.uncertainty)),
        groups_out=smk.output.groups,
        gaps_out=smk.output.gaps,
    )


run_rule(snakemake, main)  # noqa: F821
