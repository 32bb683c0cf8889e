"""Snakemake script: one model from its prediction file to its metric rows (`shards: 1`)."""

import json

from hieval.engine.icm import IcmParams
from hieval.inputs.normalize import PREDICTIONS
from hieval.inputs.options import LabelOptions
from hieval.pipeline import ModelFiles, NormalizeJob, count_and_score, normalize_file
from hieval.resources import Resources
from hieval.workflow_script import run_rule


def main(smk):
    model = smk.wildcards.model
    # Machine settings come from the config, not params: they bound memory, never change a
    # number, so changing them must not rerun anything.
    resources = Resources(threads=smk.threads, **smk.config.get("engine", {}))
    normalize_file(
        NormalizeJob(
            path=smk.input.labels,
            name=model,
            role=PREDICTIONS,
            out=smk.output.labels,
            record_out=smk.output.record,
            levels_file=smk.input.levels,
            options=LabelOptions(**json.loads(smk.params.options)),
            unknown_codes=smk.params.unknown_codes,
            malformed_codes=smk.params.malformed_codes,
            gold=smk.input.gold,
            unknown_docs=smk.params.unknown_docs,
            default_threshold=smk.params.threshold,
            resources=resources,
            scores_out=smk.output.scores,
            tuned=smk.input.get("tuned"),
        )
    )
    count_and_score(
        model=model,
        gold=smk.input.gold,
        labels=smk.output.labels,
        scores=smk.output.scores,
        record=smk.output.record,
        levels_file=smk.input.levels,
        ancestors=smk.input.ancestors,
        max_level=smk.params.max_level,
        params=IcmParams(**json.loads(smk.params.icm)),
        label_set=smk.params.label_set,
        ks=tuple(smk.params.ks),
        out=ModelFiles(
            nodes=smk.output.nodes,
            docs=smk.output.docs,
            item_sums=smk.output.item_sums,
            metrics=smk.output.metrics,
            nodes_report=smk.output.nodes_report,
            ranking=smk.output.ranking,
            notes=smk.output.notes,
        ),
        resources=resources,
        train_gold=smk.input.get("train_gold"),
    )


run_rule(snakemake, main)  # noqa: F821
