"""Snakemake script: write the deterministic synthetic demo (gold + model zoo)."""

from pathlib import Path

from hieval.experiments.demo import write_demo
from hieval.workflow_script import log, run_rule


def main(smk):
    log.info(f"generating {smk.params.documents} documents with seed {smk.params.seed}")
    write_demo(
        smk.input.levels,
        smk.output.gold,
        Path(smk.output.predictions[0]).parent,
        smk.params.seed,
        smk.params.documents,
        dev_gold_out=smk.output.dev_gold,
        dev_prediction_dir=Path(smk.output.dev_predictions[0]).parent,
    )


run_rule(snakemake, main)  # noqa: F821
