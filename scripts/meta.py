"""Snakemake script: the formal-property experiments on synthetic data (results/meta/)."""

import json

from hieval.experiments.meta import MetaParams, write_experiments
from hieval.workflow_script import run_rule


def main(smk):
    write_experiments(
        MetaParams.from_config(json.loads(smk.params.meta)),
        workers=smk.threads,
        trials_out=smk.output.trials,
        table_out=smk.output.table,
        parameters_out=smk.output.parameters,
        markdown_out=smk.output.markdown,
    )


# The trials run in spawned worker processes, which import this file again as __mp_main__:
# the guard keeps them from running the rule a second time.
if __name__ == "__main__":
    run_rule(snakemake, main)  # noqa: F821
