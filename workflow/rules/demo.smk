"""The embedded synthetic demo: a seeded test set and model zoo (results/demo/)."""


rule demo_data:
    input:
        levels=LEVELS,
    output:
        gold="results/demo/gold.parquet",
        predictions=expand(
            "results/demo/predictions/{model}.parquet", model=DEMO_MODELS
        ),
    log:
        "logs/demo/demo_data.log",
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        seed=config["demo"]["seed"],
        documents=config["demo"]["documents"],
    script:
        "../../scripts/demo_data.py"
