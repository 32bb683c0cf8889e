"""Hierarchical error analysis over all models (results/report/): error distance
(errors.parquet), each model's near-miss confusions and per-code table."""


rule error_analysis:
    input:
        unpack(train_gold_input),
        gold="results/inputs/gold.parquet",
        labels=expand("results/inputs/predictions/{model}.parquet", model=MODEL_NAMES),
        levels=LEVELS,
        ancestors=ANCESTORS,
    output:
        errors="results/report/errors.parquet",
        confusions=expand(
            "results/report/confusions/{model}.parquet", model=MODEL_NAMES
        ),
        codes=expand("results/report/codes/{model}.parquet", model=MODEL_NAMES),
    log:
        "logs/report/error_analysis.log",
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        models=MODEL_NAMES,
        max_level=config["max_level"],
        # A JSON string: Snakemake records it, so a new seed or count reruns the job.
        uncertainty=json.dumps(config["uncertainty"], sort_keys=True),
    script:
        "../../scripts/error_analysis.py"


rule group_analysis:
    input:
        gold="results/inputs/gold.parquet",
        docs=expand("results/counts/{model}/docs.parquet", model=MODEL_NAMES),
        doc_groups=config["doc_groups"] or [],
    output:
        groups="results/report/groups.parquet",
        gaps="results/report/group_gaps.parquet",
    log:
        "logs/report/group_analysis.log",
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        models=MODEL_NAMES,
        uncertainty=json.dumps(config["uncertainty"], sort_keys=True),
    script:
        "../../scripts/group_analysis.py"
