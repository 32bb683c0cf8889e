"""Snakemake script: build results/hierarchy/{levels,ancestors}.parquet from the chosen source."""

from hieval.pipeline import build_hierarchy
from hieval.workflow_script import run_rule


def main(smk):
    # max_level comes from the config, not params: checking it must not make a new max_level
    # rebuild the hierarchy (and so renormalise every file); a user's tree has its levels known
    # only here, so an impossible max_level stops the run before any file is normalised.
    build_hierarchy(
        smk.params.source,
        smk.input.source if hasattr(smk.input, "source") else None,
        levels_out=smk.output.levels,
        ancestors_out=smk.output.ancestors,
        sha256=smk.params.sha256,
        max_level=smk.config.get("max_level"),
        cache_dir=smk.params.cache_dir,
        tables_cache=smk.params.tables_cache,
    )


run_rule(snakemake, main)  # noqa: F821
