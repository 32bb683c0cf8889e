"""Snakemake script: tidy metrics and the per-node over/under-prediction report of one model."""

import json
from pathlib import Path

from hieval import paths
from hieval.engine.icm import IcmParams
from hieval.hierarchy.table import read_level_table
from hieval.pipeline import model_metrics
from hieval.report import node_report, write_csv
from hieval.workflow_script import run_rule


def main(smk, log):
    model_metrics(
        Path(smk.input.nodes).parent,
        smk.wildcards.model,
        smk.output.metrics,
        smk.input.levels,
        IcmParams(**json.loads(smk.params.icm)),
        smk.params.label_set,
    )
    table = read_level_table(smk.input.levels)
    write_csv(
        node_report(paths.read_parquet(smk.input.nodes), table.frame, table.levels),
        smk.output.nodes_report,
    )


run_rule(snakemake, main)  # noqa: F821
