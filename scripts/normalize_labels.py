"""Snakemake script: validate and normalise the gold or one model's predictions."""

import json

from hieval.inputs.options import LabelOptions
from hieval.pipeline import NormalizeJob, normalize_file
from hieval.resources import Resources
from hieval.workflow_script import run_rule


def main(smk):
    labels = smk.input.labels  # one file, or the gold's list of files to pool
    normalize_file(
        NormalizeJob(
            path=labels if isinstance(labels, str) else list(labels),
            name=smk.params.name,
            role=smk.params.role,
            out=smk.output.labels,
            record_out=smk.output.record,
            levels_file=smk.input.levels,
            options=LabelOptions(**json.loads(smk.params.options)),
            unknown_codes=smk.params.unknown_codes,
            malformed_codes=smk.params.malformed_codes,
            gold=smk.input.gold if hasattr(smk.input, "gold") else None,
            unknown_docs=smk.params.unknown_docs,
            default_threshold=smk.params.threshold,
            # Machine settings come from the config, not params: they bound memory, never change a
            # number, so changing them must not rerun anything.
            resources=Resources(threads=smk.threads, **smk.config.get("engine", {})),
            scores_out=smk.output.get("scores"),
            tuned=smk.input.get("tuned"),
        )
    )


run_rule(snakemake, main)  # noqa: F821
