"""Snakemake script: build results/hierarchy/{levels,ancestors}.parquet from the chosen source."""

from hieval.hierarchy.sources import check_cached
from hieval.pipeline import build_hierarchy
from hieval.workflow_script import run_rule


def main(smk, log):
    path = smk.input.source if hasattr(smk.input, "source") else None
    if path and smk.params.sha256:
        check_cached(path, smk.params.sha256)
    build_hierarchy(smk.params.source, path, smk.output.levels, smk.output.ancestors, log)


run_rule(snakemake, main)  # noqa: F821
