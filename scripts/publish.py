"""Snakemake script: the HTML report, the paper tables, the figures and the zoo's history."""

import json

from hieval.pipeline import publish_reports
from hieval.workflow_script import run_rule


def main(smk):
    publish_reports(
        tidy=smk.input.tidy,
        nodes=dict(zip(smk.params.models, smk.input.nodes, strict=True)),
        records=list(smk.input.records),
        levels_file=smk.input.levels,
        max_level=smk.params.max_level,
        hierarchy=smk.params.hierarchy,
        settings=json.loads(smk.params.settings),
        html_out=smk.output.html,
        tex_out=smk.output.tex,
        markdown_out=smk.output.markdown,
        figures_out=smk.output.figures,
        train_gold=smk.input.get("train_gold"),
        intervals=smk.input.get("intervals"),
        comparisons=smk.input.get("comparisons"),
        curves=dict(zip(smk.params.tuned, smk.input.curves, strict=True)),
        history=smk.params.history,
        systems=json.loads(smk.params.systems),
    )


run_rule(snakemake, main)  # noqa: F821
