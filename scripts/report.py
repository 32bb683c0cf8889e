"""Snakemake script: the reports over all models — the models' error distance rows gathered
(errors.parquet), the tables (metrics.parquet/.csv, summary.csv/.md), then the HTML report,
the paper tables, the figures and the zoo's history; last, what an earlier configuration left
in results/report goes."""

import json
from pathlib import Path

from hieval.analysis_stage import gather_errors
from hieval.pipeline import ReportJob, final_reports, publish_reports
from hieval.reports.leftovers import remove_leftovers
from hieval.workflow_script import run_rule


def main(smk):
    systems = json.loads(smk.params.systems)
    gather_errors(list(smk.input.errors), smk.output.errors)
    final_reports(
        metrics=[*smk.input.metrics, *smk.input.ranking],
        notes=list(smk.input.notes),
        records=list(smk.input.records),
        levels_file=smk.input.levels,
        max_level=smk.params.max_level,
        models=smk.params.models,
        hierarchy=smk.params.hierarchy,
        out_dir=Path(smk.output.metrics).parent,
        intervals=smk.input.get("intervals"),
        comparisons=smk.input.get("comparisons"),
        systems=systems,
        conventions=smk.input.conventions,
    )
    publish_reports(
        ReportJob(
            tidy=smk.output.metrics,
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
            systems=systems,
            notes=list(smk.input.notes),
            analysis_dir=Path(smk.output.metrics).parent,
            confidence=smk.params.confidence,
            replicates=smk.input.get("replicates"),
            summary_md=smk.output.summary_md,
            paper_table=smk.params.paper_table,
            conventions=smk.input.conventions,
            conventions_tests=smk.input.conventions_tests,
        )
    )
    remove_leftovers(Path(smk.output.metrics).parent, [*smk.input, *smk.output])


run_rule(snakemake, main)  # noqa: F821
