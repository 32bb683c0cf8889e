"""Named conventions: each model's headline metrics as CAML's and Edin et al.'s code compute
them, beside hieval's own (results/report/conventions.parquet)."""


rule conventions:
    input:
        gold=results("inputs/gold.parquet"),
        labels=expand(results("inputs/predictions/{model}.parquet"), model=MODEL_NAMES),
        scores=expand(results("inputs/scores/{model}.parquet"), model=MODEL_NAMES),
        records=expand(results("inputs/predictions/{model}.json"), model=MODEL_NAMES),
        metrics=expand(results("metrics/{model}.parquet"), model=MODEL_NAMES),
        ranking=expand(results("ranking/{model}.parquet"), model=MODEL_NAMES),
        levels=LEVELS,
        label_spaces=list(LABEL_SPACES.values()),
    output:
        table=results("report/conventions.parquet"),
        # Edin et al.'s McNemar test of each pair of models (hieval.conventions.mcnemar)
        tests=results("report/conventions_tests.parquet"),
    log:
        logs("report/conventions.log"),
    conda:
        "../envs/hieval.yaml"
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        hieval=HIEVAL_CODE,
        models=MODEL_NAMES,
        conventions=config["conventions"],
        ks=sorted(config["ranking"]["k"]),
        selections=convention_selections(),
        default_threshold=config["threshold"],
        label_spaces=LABEL_SPACES,
    script:
        "../../scripts/conventions.py"
