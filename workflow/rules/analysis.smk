"""Hierarchical error analysis (results/report/): each model's error distance rows, near-miss
confusions and per-code table and the error distance of all models (errors.parquet), in one
job over the zoo (a job per model cost a process start each, more than the analysis of a
demo-sized model); and with config doc_groups the metrics per group of documents."""


rule error_analysis:
    input:
        unpack(train_gold_input),
        gold=results("inputs/gold.parquet"),
        labels=expand(results("inputs/predictions/{model}.parquet"), model=MODEL_NAMES),
        nodes=expand(results("counts/{model}/nodes.parquet"), model=MODEL_NAMES),
        levels=LEVELS,
        ancestors=ANCESTORS,
    output:
        distance=expand(results("errors/{model}.parquet"), model=MODEL_NAMES),
        errors=results("report/errors.parquet"),
        confusions=expand(
            results("report/confusions/{model}.parquet"), model=MODEL_NAMES
        ),
        codes=expand(results("report/codes/{model}.parquet"), model=MODEL_NAMES),
    log:
        logs("report/errors.log"),
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
        gold=results("inputs/gold.parquet"),
        docs=expand(results("counts/{model}/docs.parquet"), model=MODEL_NAMES),
        labels=expand(results("inputs/predictions/{model}.parquet"), model=MODEL_NAMES),
        levels=LEVELS,
        ancestors=ANCESTORS,
        doc_groups=config["doc_groups"] or [],
    output:
        groups=results("report/groups.parquet"),
        gaps=results("report/group_gaps.parquet"),
    log:
        logs("report/group_analysis.log"),
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        models=MODEL_NAMES,
        icm=icm_params(),
        uncertainty=json.dumps(config["uncertainty"], sort_keys=True),
    script:
        "../../scripts/group_analysis.py"
