"""Bootstrap intervals and paired randomization tests over the zoo (results/report/), when
`uncertainty.bootstrap` is above 0; the report then reads them."""

# Wall minutes beyond reading the inputs (a cluster kills a job past its request): on 2 cores a
# MIMIC-III-sized pair of models takes about 1.6 s per 1,000 permutations for the count rows
# and, when both are scored (top 100 per document), about 4 s per 1,000 and level for ROC-AUC;
# 1,000 replicates of a model about 1 s (benchmarks/README.md). One minute per pair and 5,000
# permutations and per model and 5,000 replicates covers that; scored models near the AUC cap
# (4M scored pairs a level) need more: --set-resources uncertainty:runtime=MINUTES.
UNCERTAINTY_PAIRS = len(MODEL_NAMES) * (len(MODEL_NAMES) - 1) // 2
UNCERTAINTY_MINUTES = math.ceil(
    UNCERTAINTY_PAIRS * config["uncertainty"]["permutations"] / 5000
    + len(MODEL_NAMES) * config["uncertainty"]["bootstrap"] / 5000
)


rule uncertainty:
    input:
        unpack(train_gold_input),
        gold=results("inputs/gold.parquet"),
        predictions=expand(
            results("inputs/predictions/{model}.parquet"), model=MODEL_NAMES
        ),
        item_sums=expand(results("counts/{model}/item_sums.parquet"), model=MODEL_NAMES),
        metrics=expand(results("metrics/{model}.parquet"), model=MODEL_NAMES),
        scores=expand(results("inputs/scores/{model}.parquet"), model=MODEL_NAMES),
        ranking=expand(results("ranking/{model}.parquet"), model=MODEL_NAMES),
        levels=LEVELS,
        ancestors=ANCESTORS,
    output:
        intervals=results("report/intervals.parquet"),
        comparisons=results("report/comparisons.parquet"),
        # the headline rows' replicates: the history keeps them (paired change intervals)
        replicates=results("report/replicates.parquet"),
    log:
        logs("report/uncertainty.log"),
    conda:
        "../envs/hieval.yaml"
    threads: uncertainty_threads
    resources:
        mem_mb=mem_mb,
        runtime=lambda wildcards, input, attempt: runtime(wildcards, input, attempt)
        + UNCERTAINTY_MINUTES * attempt,
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
