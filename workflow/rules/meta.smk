"""Formal-property experiments on synthetic data (Amigó & Delgado 2022, Section 6): results/meta/.

Not part of `rule all`: run `snakemake --cores 2 meta` (config `meta.full: true` for the full
trial count).
"""

import json


rule meta_evaluation:
    output:
        table=results("meta/formal_properties.parquet"),
        markdown=results("meta/formal_properties.md"),
        trials=results("meta/trials.parquet"),
        parameters=results("meta/parameters.json"),
    log:
        logs("meta/meta_evaluation.log"),
    conda:
        "../envs/hieval.yaml"
    threads: 2
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        # A JSON string: Snakemake records it, so any change to the meta config reruns the job.
        meta=json.dumps(config["meta"], sort_keys=True),
        hieval=HIEVAL_CODE,
    script:
        "../../scripts/meta.py"


rule meta:
    input:
        rules.meta_evaluation.output,
