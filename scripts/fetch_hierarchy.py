"""Snakemake script: download a pinned hierarchy source into resources/."""

from hieval.hierarchy.sources import DOWNLOADS, download
from hieval.workflow_script import log, run_rule


def main(smk):
    spec = DOWNLOADS[smk.wildcards.source]
    log.info(f"downloading {spec.url}")
    download(spec, smk.output[0], smk.params.sha256)


run_rule(snakemake, main)  # noqa: F821
