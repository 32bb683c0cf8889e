"""Snakemake script: reduce one model's shard count tables exactly (sums and concatenations)."""

from hieval.pipeline import gather_counts
from hieval.workflow_script import run_rule


def main(smk, log):
    gather_counts(
        list(smk.input.nodes),
        list(smk.input.docs),
        list(smk.input.icm_items),
        smk.output.nodes,
        smk.output.docs,
        smk.output.icm_items,
    )
    log(f"gathered {len(smk.input.nodes)} shards")


run_rule(snakemake, main)  # noqa: F821
