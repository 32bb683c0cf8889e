"""Snakemake script: build results/hierarchy/{levels,ancestors}.parquet from the chosen source."""

from hieval.pipeline import build_hierarchy
from hieval.workflow_script import run_rule


def main(smk, log):
    path = smk.input.source if hasattr(smk.input, "source") else None
    build_hierarchy(
        smk.params.source,
        path,
        smk.output.levels,
        smk.output.ancestors,
        log,
        sha256=smk.params.sha256,
    )


run_rule(snakemake, main)  # noqa: F821
