"""Hierarchical error analysis (results/report/): each model's error distance rows, near-miss
confusions and per-code table (a job per model, so that a changed model reruns alone; the
report job gathers the error distance of all models, errors.parquet), and with config
doc_groups the metrics per group of documents."""


rule model_errors:
    input:
        unpack(train_gold_input),
        gold=results("inputs/gold.parquet"),
        labels=results("inputs/predictions/{model}.parquet"),
        nodes=results("counts/{model}/nodes.parquet"),
        levels=LEVELS,
        ancestors=ANCESTORS,
    output:
        distance=results("errors/{model}.parquet"),
        confusions=results("report/confusions/{model}.parquet"),
        codes=results("report/codes/{model}.parquet"),
    log:
        logs("errors/{model}.log"),
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        max_level=config["max_level"],
        # A JSON string: Snakemake records it, so a new seed or count reruns the job.
        uncertainty=json.dumps(config["uncertainty"], sort_keys=True),
    script:
        "../../scripts/model_errors.py"


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
