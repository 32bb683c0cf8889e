"""Snakemake script: reduce one model's shard count tables exactly (sums and concatenations)."""

from hieval.pipeline import gather_counts
from hieval.workflow_script import run_rule


def main(smk):
    gather_counts(
        nodes=list(smk.input.nodes),
        docs=list(smk.input.docs),
        item_sums=list(smk.input.item_sums),
        nodes_out=smk.output.nodes,
        docs_out=smk.output.docs,
        item_sums_out=smk.output.item_sums,
    )


run_rule(snakemake, main)  # noqa: F821
