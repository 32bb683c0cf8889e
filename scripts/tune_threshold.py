"""Snakemake script: tune one model's threshold on its dev scores (refusing the test set)."""

from hieval.pipeline import TuningJob, tune_threshold
from hieval.workflow_script import run_rule


def main(smk):
    tune_threshold(
        TuningJob(
            model=smk.wildcards.model,
            dev_gold=smk.input.dev_gold,
            dev_scores=smk.input.dev_scores,
            dev_records=(smk.input.dev_gold_record, smk.input.dev_record),
            test_gold=smk.input.gold,
            test_record=smk.input.gold_record,
            per_code=smk.params.per_code,
            min_support=smk.params.min_support,
            allow_dev_test_overlap=smk.params.allow_dev_test_overlap,
            method=smk.params.method,
            curve_out=smk.output.curve,
            codes_out=smk.output.codes,
            tuned_out=smk.output.tuned,
        )
    )


run_rule(snakemake, main)  # noqa: F821
