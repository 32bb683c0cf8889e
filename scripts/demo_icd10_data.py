"""Snakemake script: write the ICD-10 demo (MIMIC-IV-like gold tables + model zoo)."""

from pathlib import Path

from hieval.experiments.demo import write_icd10_demo
from hieval.workflow_script import log, run_rule


def main(smk):
    log.info(f"generating {smk.params.documents} ICD-10 documents with seed {smk.params.seed}")
    write_icd10_demo(
        smk.input.levels,
        diagnoses_out=smk.output.diagnoses,
        procedures_out=smk.output.procedures,
        prediction_dir=Path(smk.output.predictions[0]).parent,
        seed=smk.params.seed,
        documents=smk.params.documents,
    )


run_rule(snakemake, main)  # noqa: F821
