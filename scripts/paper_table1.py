"""Snakemake script: regenerate the CoPHE paper's Table 1 through hieval's own code path."""

from hieval.atomic import write_text
from hieval.experiments.paper import table1_markdown
from hieval.hierarchy.table import read_level_table
from hieval.workflow_script import log, run_rule


def main(smk):
    write_text(smk.output[0], table1_markdown(read_level_table(smk.input.levels)))
    log.info("Table 1 counts equal the paper's")


run_rule(snakemake, main)  # noqa: F821
