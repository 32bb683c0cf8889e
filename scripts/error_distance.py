"""Snakemake script: errors.parquet, the error distance rows of every model."""

from hieval.analysis_stage import gather_errors
from hieval.workflow_script import run_rule


def main(smk):
    gather_errors(list(smk.input), smk.output[0])


run_rule(snakemake, main)  # noqa: F821
