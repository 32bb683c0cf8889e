"""Count TP/FP/FN per node and document and ICM sums per item (DuckDB), then metrics."""


rule count:
    input:
        gold="results/inputs/gold.parquet",
        predictions="results/inputs/predictions/{model}.parquet",
        levels=LEVELS,
        ancestors=ANCESTORS,
    output:
        nodes="results/counts/{model}/nodes.parquet",
        docs="results/counts/{model}/docs.parquet",
        icm_items="results/counts/{model}/items.parquet",
    log:
        "logs/counts/{model}.log",
    conda:
        "../envs/hieval.yaml"
    threads: 2
    params:
        hieval=HIEVAL_CODE,
        max_level=config["max_level"],
        icm=icm_params(),
    script:
        "../../scripts/count.py"


rule metrics:
    input:
        nodes="results/counts/{model}/nodes.parquet",
        docs="results/counts/{model}/docs.parquet",
        icm_items="results/counts/{model}/items.parquet",
        levels=LEVELS,
    output:
        metrics="results/metrics/{model}.parquet",
        nodes_report="results/report/nodes/{model}.csv",
    log:
        "logs/metrics/{model}.log",
    conda:
        "../envs/hieval.yaml"
    params:
        hieval=HIEVAL_CODE,
        icm=icm_params(),
        label_set=config["comparison"]["label_set"],
    script:
        "../../scripts/metrics.py"
