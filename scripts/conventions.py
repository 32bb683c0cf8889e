"""Snakemake script: every model's headline metrics under each named convention."""

import json

from hieval.conventions.stage import write_conventions
from hieval.workflow_script import run_rule


def main(smk):
    models = smk.params.models
    selections = json.loads(smk.params.selections)
    spaces = dict(smk.params.label_spaces)
    write_conventions(
        models=models,
        gold=smk.input.gold,
        labels=dict(zip(models, smk.input.labels, strict=True)),
        scores=dict(zip(models, smk.input.scores, strict=True)),
        records=dict(zip(models, smk.input.records, strict=True)),
        tidy={
            name: [metrics, ranking]
            for name, metrics, ranking in zip(
                models, smk.input.metrics, smk.input.ranking, strict=True
            )
        },
        levels_file=smk.input.levels,
        conventions=smk.params.conventions,
        ks=tuple(smk.params.ks),
        selections={name: tuple(pair) for name, pair in selections.items()},
        default_threshold=smk.params.default_threshold,
        label_spaces={
            name: (path, f"model sheet, model {name}, label_space {path}")
            for name, path in spaces.items()
        },
        out=smk.output.table,
        tests_out=smk.output.tests,
    )


run_rule(snakemake, main)  # noqa: F821
