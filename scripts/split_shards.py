"""Snakemake script: split a normalised label table into shards by a stable hash of doc_id."""

from hieval.pipeline import split_by_document
from hieval.workflow_script import log, run_rule


def main(smk):
    sizes = split_by_document(smk.input[0], list(smk.output))
    log.info(f"{sum(sizes)} rows into {len(sizes)} shards: {sizes}")


run_rule(snakemake, main)  # noqa: F821
