"""Snakemake script: the formal-property experiments on synthetic data (results/meta/)."""

import json

from hieval.atomic import write_text
from hieval.experiments.meta import MetaParams, parameters, render_markdown, run
from hieval.inputs import write_parquet
from hieval.workflow_script import log, run_rule


def main(smk):
    params = MetaParams.from_config(json.loads(smk.params.meta))
    log.info(
        f"{params.trials} trials of {len(params.tests)} tests, {params.items} items each, "
        f"seed {params.seed}, {smk.threads} worker process(es)"
    )
    scores, table = run(params, smk.threads)
    write_parquet(scores, smk.output.trials)
    write_parquet(table, smk.output.table)
    info = json.dumps(parameters(params), indent=2, ensure_ascii=False)
    write_text(smk.output.parameters, info + "\n")
    write_text(smk.output.markdown, render_markdown(table, params))


# The trials run in spawned worker processes, which import this file again as __mp_main__:
# the guard keeps them from running the rule a second time.
if __name__ == "__main__":
    run_rule(snakemake, main)  # noqa: F821
