"""Count TP/FP/FN per node and document (DuckDB), then metrics per model."""


rule count:
    input:
        gold="results/inputs/gold.parquet",
        predictions="results/inputs/predictions/{model}.parquet",
        levels=LEVELS,
        ancestors=ANCESTORS,
    output:
        nodes="results/counts/{model}/nodes.parquet",
        docs="results/counts/{model}/docs.parquet",
    log:
        "logs/counts/{model}.log",
    conda:
        "../envs/hieval.yaml"
    threads: 2
    params:
        max_level=config["max_level"],
    script:
        "../../scripts/count.py"


rule metrics:
    input:
        nodes="results/counts/{model}/nodes.parquet",
        levels=LEVELS,
    output:
        metrics="results/metrics/{model}.parquet",
        nodes_report="results/report/nodes/{model}.csv",
    log:
        "logs/metrics/{model}.log",
    conda:
        "../envs/hieval.yaml"
    script:
        "../../scripts/metrics.py"
