"""Snakemake script: per-node and per-document TP/FP/FN of one model (DuckDB)."""

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
        smk.threads,
        log,
    )


run_rule(snakemake, main)  # noqa: F821
