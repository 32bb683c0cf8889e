"""Snakemake script: bootstrap intervals and paired comparisons over the zoo."""

import json

from hieval.engine.icm import IcmParams
from hieval.metrics.uncertainty.settings import Settings
from hieval.pipeline import UncertaintyJob, uncertainty
from hieval.resources import Resources
from hieval.workflow_script import run_rule


def main(smk):
    models = list(smk.params.models)
    uncertainty(
        UncertaintyJob(
            gold=smk.input.gold,
            predictions=dict(zip(models, smk.input.predictions, strict=True)),
            item_sums=dict(zip(models, smk.input.item_sums, strict=True)),
            metrics=dict(zip(models, smk.input.metrics, strict=True)),
            levels_file=smk.input.levels,
            ancestors=smk.input.ancestors,
            max_level=smk.params.max_level,
            params=IcmParams(**json.loads(smk.params.icm)),
            label_set=smk.params.label_set,
            settings=Settings(**json.loads(smk.params.uncertainty)),
            intervals_out=smk.output.intervals,
            comparisons_out=smk.output.comparisons,
            resources=Resources(threads=smk.threads),
            scores=dict(zip(models, smk.input.scores, strict=True)),
            ranking=dict(zip(models, smk.input.ranking, strict=True)),
            ks=tuple(smk.params.ks),
            train_gold=smk.input.get("train_gold"),
            replicates_out=smk.output.replicates,
        )
    )


run_rule(snakemake, main)  # noqa: F821
