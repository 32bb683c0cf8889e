"""Scores: thresholds tuned on the dev set (results/thresholds/) and the ranking, calibration
and selection rows of each model (results/ranking/); a model's jobs read only its own files.
"""


rule tune_threshold:
    input:
        dev_gold=results("inputs/dev/gold.parquet"),
        dev_gold_record=results("inputs/dev/gold.json"),
        dev_scores=results("inputs/dev/scores/{model}.parquet"),
        dev_record=results("inputs/dev/predictions/{model}.json"),
        gold=results("inputs/gold.parquet"),
        gold_record=results("inputs/gold.json"),
    output:
        curve=results("thresholds/{model}.parquet"),
        codes=results("thresholds/{model}.codes.parquet"),
        tuned=results("thresholds/{model}.json"),
    log:
        logs("thresholds/{model}.log"),
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        per_code=config["tuning"]["per_code"],
        min_support=config["tuning"]["min_support"],
        allow_dev_test_overlap=config["tuning"]["allow_dev_test_overlap"],
        method=config["tuning"]["method"],
    script:
        "../../scripts/tune_threshold.py"


# With `shards: 1` the model's evaluate_model job does this (workflow/rules/evaluate.smk).
if SHARDED:

    rule score_metrics:
        input:
            unpack(train_gold_input),
            gold=results("inputs/gold.parquet"),
            scores=results("inputs/scores/{model}.parquet"),
            record=results("inputs/predictions/{model}.json"),
            levels=LEVELS,
            ancestors=ANCESTORS,
        output:
            metrics=results("ranking/{model}.parquet"),
            notes=results("ranking/{model}.json"),
        log:
            logs("ranking/{model}.log"),
        conda:
            "../envs/hieval.yaml"
        resources:
            mem_mb=mem_mb,
            runtime=runtime,
        params:
            hieval=HIEVAL_CODE,
            max_level=config["max_level"],
            ks=sorted(config["ranking"]["k"]),
            icm=icm_params(),
        script:
            "../../scripts/score_metrics.py"
