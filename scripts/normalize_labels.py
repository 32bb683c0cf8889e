"""Snakemake script: validate and normalise the gold or one model's predictions."""

import json

from hieval.inputs import LabelOptions
from hieval.pipeline import Engine, normalize
from hieval.workflow_script import run_rule


def main(smk, log):
    # Engine settings come from the config, not params: they bound memory, never change a
    # number, so changing them must not rerun anything.
    gold = smk.input.gold if hasattr(smk.input, "gold") else None
    normalize(
        smk.input.labels,
        smk.params.name,
        smk.output.labels,
        smk.output.record,
        smk.input.levels,
        LabelOptions(**json.loads(smk.params.options)),
        smk.params.unknown_codes,
        gold,
        smk.params.unknown_docs,
        smk.params.threshold,
        log,
        Engine(threads=smk.threads, **smk.config.get("engine", {})),
    )


run_rule(snakemake, main)  # noqa: F821
