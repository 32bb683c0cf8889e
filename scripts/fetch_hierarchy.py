"""Snakemake script: download a pinned hierarchy source into resources/."""

from hieval.hierarchy.sources import DOWNLOADS, download
from hieval.workflow_script import run_rule


def main(smk, log):
    spec = DOWNLOADS[smk.wildcards.source]
    log(f"downloading {spec.url}")
    download(spec, smk.output[0], smk.params.sha256)


run_rule(snakemake, main)  # noqa: F821
