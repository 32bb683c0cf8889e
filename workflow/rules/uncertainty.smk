"""Bootstrap intervals and paired randomization tests over the zoo (results/report/), when
`uncertainty.bootstrap` is above 0; the report then reads them."""


rule uncertainty:
    input:
        gold="results/inputs/gold.parquet",
        predictions=expand(
            "results/inputs/predictions/{model}.parquet", model=MODEL_NAMES
        ),
        item_sums=expand("results/counts/{model}/item_sums.parquet", model=MODEL_NAMES),
        metrics=expand("results/metrics/{model}.parquet", model=MODEL_NAMES),
        scores=expand("results/inputs/scores/{model}.parquet", model=MODEL_NAMES),
        ranking=expand("results/ranking/{model}.parquet", model=MODEL_NAMES),
        levels=LEVELS,
        ancestors=ANCESTORS,
    output:
        intervals="results/report/intervals.parquet",
        comparisons="results/report/comparisons.parquet",
    log:
        "logs/report/uncertainty.log",
    conda:
        "../envs/hieval.yaml"
    threads: 2
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
    params:
        models=MODEL_NAMES,
        max_level=config["max_level"],
        icm=icm_params(),
        label_set=config["comparison"]["label_set"],
        ks=sorted(config["ranking"]["k"]),
        # A JSON string: Snakemake records it, so a new seed or count reruns the job.
        uncertainty=json.dumps(config["uncertainty"], sort_keys=True),
        hieval=HIEVAL_CODE,
    script:
        "../../scripts/uncertainty.py"
