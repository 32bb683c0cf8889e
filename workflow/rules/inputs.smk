"""Validate and normalise gold and predictions to canonical long format (results/inputs/)."""


rule normalize_gold:
    input:
        unpack(gold_files),
        levels=LEVELS,
    output:
        labels=results("inputs/gold.parquet"),
        record=results("inputs/gold.json"),
    log:
        logs("inputs/gold.log"),
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        name="gold",
        role="gold",
        options=gold_options(),
        unknown_codes=config["unknown_codes"],
        malformed_codes=config["malformed_codes"],
        unknown_docs=config["unknown_docs"],
        threshold=config["threshold"],
    script:
        "../../scripts/normalize_labels.py"


# With `shards: 1` the model's evaluate_model job does this (workflow/rules/evaluate.smk).
if SHARDED:

    rule normalize_predictions:
        input:
            unpack(model_files),
            unpack(tuned_files),
            levels=LEVELS,
            gold=results("inputs/gold.parquet"),
        output:
            labels=results("inputs/predictions/{model}.parquet"),
            record=results("inputs/predictions/{model}.json"),
            scores=results("inputs/scores/{model}.parquet"),
        log:
            logs("inputs/{model}.log"),
        conda:
            "../envs/hieval.yaml"
        resources:
            mem_mb=mem_mb,
            runtime=runtime,
        params:
            hieval=HIEVAL_CODE,
            name="{model}",
            role="predictions",
            options=model_options,
            unknown_codes=config["unknown_codes"],
            malformed_codes=config["malformed_codes"],
            unknown_docs=config["unknown_docs"],
            threshold=config["threshold"],
        script:
            "../../scripts/normalize_labels.py"


rule normalize_train_gold:
    input:
        labels=config["train_gold"] or [],
        levels=LEVELS,
    output:
        labels=results("inputs/train_gold.parquet"),
        record=results("inputs/train_gold.json"),
    log:
        logs("inputs/train_gold.log"),
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        name="train_gold",
        role="gold",
        options=other_gold_options(),
        unknown_codes=config["unknown_codes"],
        malformed_codes=config["malformed_codes"],
        unknown_docs=config["unknown_docs"],
        threshold=config["threshold"],
    script:
        "../../scripts/normalize_labels.py"


rule normalize_dev_gold:
    input:
        labels=config["dev_gold"] or [],
        levels=LEVELS,
    output:
        labels=results("inputs/dev/gold.parquet"),
        record=results("inputs/dev/gold.json"),
    log:
        logs("inputs/dev/gold.log"),
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        name="dev_gold",
        role="gold",
        options=other_gold_options(),
        unknown_codes=config["unknown_codes"],
        malformed_codes=config["malformed_codes"],
        unknown_docs=config["unknown_docs"],
        threshold=0.5,
    script:
        "../../scripts/normalize_labels.py"


rule normalize_dev_predictions:
    input:
        unpack(dev_model_files),
        levels=LEVELS,
        gold=results("inputs/dev/gold.parquet"),
    output:
        labels=results("inputs/dev/predictions/{model}.parquet"),
        record=results("inputs/dev/predictions/{model}.json"),
        scores=results("inputs/dev/scores/{model}.parquet"),
    log:
        logs("inputs/dev/{model}.log"),
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        name="{model} (dev)",
        role="predictions",
        options=dev_model_options,
        unknown_codes=config["unknown_codes"],
        malformed_codes=config["malformed_codes"],
        unknown_docs=config["unknown_docs"],
        threshold=0.5,
    script:
        "../../scripts/normalize_labels.py"
